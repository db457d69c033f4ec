/**
 * The store's span of an incoming request, made at the faces once (tracing on only): a REST
 * route's (`POST /for_store/call_tool`, by its route template, with the HTTP conventions'
 * attributes) and an MCP method's (`tools/call demo__add`, with the MCP conventions'). Its parent is
 * the caller's trace context (the `traceparent` header, or the request's `_meta`); the call
 * pipeline's spans are its children. With tracing off nothing here runs: the faces pass the
 * caller's context on as before.
 */
import { callSpan, type TraceContext } from "../domain/trace-context.js"
import type { SpanAttributes, Tracer } from "../logging/tracing.js"

export { requestSpan } from "../logging/tracing.js"

/** A request's span: a new span id under the caller's context, or the first span of a new trace. */
export const openRequestSpan = (caller: TraceContext | undefined): TraceContext => callSpan(caller)

/** Whether a status is the server's failure (a server span's error, as the HTTP conventions say). */
const serverError = (status: number): boolean => status >= 500

/** Records a REST request's span once it is answered. */
export const recordHttpSpan = (
  tracer: Tracer,
  span: TraceContext,
  request: { readonly method: string; readonly route: string | undefined; readonly path: string; readonly status: number; readonly startMs: number }
): void => {
  const attributes: SpanAttributes = {
    "http.request.method": request.method,
    "http.route": request.route,
    "url.path": request.path,
    "url.scheme": "http",
    "http.response.status_code": request.status,
    "network.transport": "tcp",
    "error.type": serverError(request.status) ? String(request.status) : undefined
  }
  tracer.record({
    name: request.route === undefined ? request.method : `${request.method} ${request.route}`,
    kind: "server",
    context: span,
    remoteParent: span.parentSpanId !== undefined,
    startMs: request.startMs,
    endMs: performance.now(),
    attributes,
    ...(serverError(request.status) ? { error: `HTTP ${request.status}` } : {})
  })
}

/** Records an MCP request's span (the store as an MCP server) once it is answered. */
export const recordMcpSpan = (
  tracer: Tracer,
  span: TraceContext,
  request: { readonly method: string; readonly target: string | undefined; readonly sessionId: string | undefined; readonly startMs: number; readonly attributes?: SpanAttributes; readonly error?: { readonly type: string; readonly message: string } | undefined }
): void => {
  tracer.record({
    name: request.target === undefined ? request.method : `${request.method} ${request.target}`,
    kind: "server",
    context: span,
    remoteParent: span.parentSpanId !== undefined,
    startMs: request.startMs,
    endMs: performance.now(),
    attributes: {
      "mcp.method.name": request.method,
      "mcp.session.id": request.sessionId,
      "network.transport": "tcp",
      "network.protocol.name": "http",
      ...request.attributes,
      "error.type": request.error?.type
    },
    ...(request.error === undefined ? {} : { error: request.error.message })
  })
}

/** The route templates of `routes` (`/for_agent/:agent_id/call_tool`), matched against a request's method and path. */
export const routeTemplates = (routes: ReadonlyArray<{ readonly method: string; readonly path: string }>) => {
  const exact = new Map<string, string>()
  const patterns: Array<{ readonly method: string; readonly parts: ReadonlyArray<string>; readonly path: string }> = []
  for (const r of routes) {
    if (r.path.includes(":")) patterns.push({ method: r.method, parts: r.path.split("/"), path: r.path })
    else exact.set(`${r.method} ${r.path}`, r.path)
  }
  return (method: string, path: string): string | undefined => {
    const hit = exact.get(`${method} ${path}`)
    if (hit !== undefined) return hit
    const parts = path.split("/")
    for (const p of patterns) {
      if (p.method !== method || p.parts.length !== parts.length) continue
      if (p.parts.every((part, i) => part.startsWith(":") ? parts[i] !== "" : part === parts[i])) return p.path
    }
    return undefined
  }
}
