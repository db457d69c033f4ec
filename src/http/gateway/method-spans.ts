/**
 * The server spans of the MCP methods the endpoint serves (tracing on only), beside tools/call's
 * own (face.ts, `toolsCallSpan`): every other request of a 2025 session (initialize, ping, the
 * lists, resources/read, prompts/get, completion/complete, logging/setLevel, subscriptions; Streamable
 * HTTP and SSE alike: `SessionSpans`, which watches the session's transport, a span per request
 * from the message read to its answer sent) and of the 2026-07-28 face (server/discover, the lists,
 * reads, prompts, completions, subscriptions/listen, tasks/get|update|cancel: `openMethodSpan` and
 * `tapAnswer`, a span from the request read to its answer written). Named by the MCP conventions
 * (`{mcp.method.name} {target}`, the target a prompt's name; a name the scope does not have stays
 * out of the span's name), with `mcp.method.name`, `mcp.session.id` (2025), `jsonrpc.request.id`,
 * `mcp.protocol.version`, `mcp.resource.uri` or `gen_ai.prompt.name`, and on a JSON-RPC error its
 * code as `rpc.response.status_code` and `error.type`. The parent is the request's `_meta`
 * traceparent, else the HTTP request's `traceparent` header; the spans of the upstream requests
 * made for it (src/runtime/upstream-span.ts) are its children.
 */
import type { ServerResponse } from "node:http"
import { Effect } from "effect"
import { readTraceContext, type TraceContext } from "../../domain/trace-context.js"
import { requestSpan, type Tracer } from "../../logging/tracing.js"
import { openRequestSpan, recordMcpSpan } from "../request-span.js"

/** How a served request failed: its JSON-RPC error, or `cancelled` (answered nothing). */
export type MethodError = { readonly code: number; readonly message: string } | { readonly type: "cancelled"; readonly message: string }

/** A served request's span, open: its context (the parent of its upstream requests' spans), and `end`. */
export interface MethodSpan {
  readonly span: TraceContext
  /** Records the span once (later calls do nothing); `streamOpen`: a subscriptions/listen whose stream opened. */
  end(error: MethodError | undefined, streamOpen?: boolean): void
}

/** What a served request is, for its span. */
export interface MethodRequest {
  readonly method: string
  readonly id: string | number
  readonly params: unknown
  readonly sessionId?: string | undefined
  readonly protocolVersion?: (() => string | undefined) | undefined
  /** The HTTP request's trace context (its `traceparent` header), the parent when `_meta` has none. */
  readonly header?: TraceContext | undefined
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

/** The JSON-RPC codes of a name the scope does not have (or bad params): its name stays out of the span's name. */
const UNKNOWN_NAME: ReadonlySet<number> = new Set([-32602, -32002])

/** Opens the span of a request being served (tracing on only: the caller checks `tracer.enabled`). */
export const openMethodSpan = (tracer: Tracer, request: MethodRequest): MethodSpan => {
  const params = isRecord(request.params) ? request.params : undefined
  const span = openRequestSpan(readTraceContext(isRecord(params?.["_meta"]) ? params["_meta"] : undefined) ?? request.header)
  const startMs = performance.now()
  let ended = false
  return {
    span,
    end: (error, streamOpen) => {
      if (ended) return
      ended = true
      const code = error !== undefined && "code" in error ? error.code : undefined
      const name = request.method === "prompts/get" && typeof params?.["name"] === "string" && !(code !== undefined && UNKNOWN_NAME.has(code)) ? params["name"] : undefined
      const uri = typeof params?.["uri"] === "string" && request.method.startsWith("resources/") ? params["uri"] : undefined
      recordMcpSpan(tracer, span, {
        method: request.method,
        target: name,
        sessionId: request.sessionId,
        startMs,
        attributes: {
          "jsonrpc.request.id": String(request.id),
          "mcp.protocol.version": request.protocolVersion?.(),
          "mcp.resource.uri": uri,
          "gen_ai.prompt.name": name,
          "rpc.response.status_code": code === undefined ? undefined : String(code),
          "mcp_store.stream": streamOpen === true ? "opened" : undefined
        },
        error: error === undefined ? undefined : { type: "code" in error ? String(error.code) : error.type, message: error.message }
      })
    }
  }
}

/** `effect` with `span` as the request's span (`requestSpan`): the parent of the spans of its upstream requests. */
export const underSpan = <A, E, R>(effect: Effect.Effect<A, E, R>, span: TraceContext | undefined): Effect.Effect<A, E, R> =>
  span === undefined ? effect : Effect.locally(effect, requestSpan, span)

/** The HTTP `traceparent` (and state, baggage) of a message's transport extra: a web Request's headers (SDK v2), or Node's (SDK 1.x's SSE). */
const headerContext = (extra: unknown): TraceContext | undefined => {
  if (!isRecord(extra)) return undefined
  const request = extra["request"] as { headers?: { get?: (name: string) => string | null } } | undefined
  const get = request?.headers?.get
  if (typeof get === "function") {
    const headers = request!.headers!
    const value = (name: string) => headers.get!(name) ?? undefined
    return readTraceContext({ traceparent: value("traceparent"), tracestate: value("tracestate"), baggage: value("baggage") })
  }
  const info = extra["requestInfo"] as { headers?: Record<string, unknown> } | undefined
  return readTraceContext(info?.headers)
}

/** What `SessionSpans` needs of a transport (either SDK's): its messages read and sent. */
interface Watched {
  onmessage?: ((message: never, extra?: never) => void) | undefined
  send(message: never, options?: never): Promise<void>
}

/** The id of a replayed initialize of a rebuilt session (endpoint.ts): not a client's request. */
const REPLAYED = "mcp-store/rebuild/"

/**
 * The spans of a 2025 session's requests (tracing on only): opened as the session's transport
 * reads each request (tools/call aside: its span is face.ts's), recorded as its answer is sent;
 * a request the client cancels, or still open when the session ends, is recorded `cancelled`.
 */
export class SessionSpans {
  private readonly open = new Map<string | number, { readonly method: string; readonly traced: MethodSpan }>()
  /** The session's protocol revision: the initialize answer's (or a rebuilt session's claims). */
  protocolVersion: string | undefined

  constructor(
    private readonly tracer: Tracer,
    private readonly sessionId: () => string | undefined
  ) {}

  /** Watches `transport`'s messages: its `onmessage` before the SDK server's (set this before connecting it), and its `send`. */
  watch(transport: Watched): void {
    const onmessage = transport.onmessage as ((message: unknown, extra?: unknown) => void) | undefined
    transport.onmessage = ((message: unknown, extra?: unknown) => {
      this.read(message, extra)
      onmessage?.(message, extra)
    }) as never
    const send = (transport.send as (message: unknown, options?: unknown) => Promise<void>).bind(transport)
    transport.send = ((message: unknown, options?: unknown) => {
      this.sent(message)
      return send(message, options)
    }) as never
  }

  /** The span of the session's request `id` being served. */
  spanOf(id: string | number): TraceContext | undefined {
    return this.open.get(id)?.traced.span
  }

  /** The session ended: the requests still open are recorded cancelled. */
  closeAll(): void {
    for (const { traced } of this.open.values()) traced.end({ type: "cancelled", message: "the session ended before the request was answered" })
    this.open.clear()
  }

  private read(message: unknown, extra: unknown): void {
    if (!isRecord(message) || typeof message["method"] !== "string") return
    const { id, method, params } = message
    if (typeof id !== "string" && typeof id !== "number") {
      if (method === "notifications/cancelled" && isRecord(params)) {
        const cancelled = params["requestId"]
        const entry = typeof cancelled === "string" || typeof cancelled === "number" ? this.open.get(cancelled) : undefined
        if (entry !== undefined) {
          this.open.delete(cancelled as string | number)
          entry.traced.end({ type: "cancelled", message: "the client cancelled the request" })
        }
      }
      return
    }
    if (method === "tools/call" || this.open.has(id) || (typeof id === "string" && id.startsWith(REPLAYED))) return
    const traced = openMethodSpan(this.tracer, {
      method,
      id,
      params,
      sessionId: this.sessionId(),
      protocolVersion: () => this.protocolVersion ?? (method === "initialize" && isRecord(params) && typeof params["protocolVersion"] === "string" ? params["protocolVersion"] : undefined),
      header: headerContext(extra)
    })
    this.open.set(id, { method, traced })
  }

  private sent(message: unknown): void {
    if (!isRecord(message) || "method" in message) return
    const id = message["id"]
    if (typeof id !== "string" && typeof id !== "number") return
    const entry = this.open.get(id)
    if (entry === undefined) return
    this.open.delete(id)
    const result = message["result"]
    if (entry.method === "initialize" && isRecord(result) && typeof result["protocolVersion"] === "string") this.protocolVersion = result["protocolVersion"]
    const error = message["error"]
    entry.traced.end(isRecord(error) ? { code: typeof error["code"] === "number" ? error["code"] : -32603, message: typeof error["message"] === "string" ? error["message"] : "error" } : undefined)
  }
}

/** The longest answer looked into for a JSON-RPC error (an error answer is short; a long one is a result). */
const MAX_LOOKED_AT = 16_384

/** The JSON-RPC error of the last piece of an answer (a JSON body, or an event stream's last event), if it is one. */
const errorIn = (last: string | undefined): MethodError | undefined => {
  if (last === undefined) return undefined
  const at = last.lastIndexOf("data: ")
  const text = at === -1 ? last : last.slice(at + 6)
  if (!text.includes('"error"')) return undefined
  try {
    const answer = JSON.parse(text.trim()) as unknown
    const error = isRecord(answer) ? answer["error"] : undefined
    if (!isRecord(error)) return undefined
    return { code: typeof error["code"] === "number" ? error["code"] : -32603, message: typeof error["message"] === "string" ? error["message"] : "error" }
  } catch {
    return undefined
  }
}

const textOf = (chunk: unknown): string | undefined => {
  if (typeof chunk === "string") return chunk.length <= MAX_LOOKED_AT ? chunk : undefined
  if (chunk instanceof Uint8Array) return chunk.byteLength <= MAX_LOOKED_AT ? Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength).toString("utf8") : undefined
  return undefined
}

/** Whether a `writeHead`'s headers say an event stream. */
const eventStream = (args: ReadonlyArray<unknown>): boolean =>
  args.some((a) => isRecord(a) && Object.entries(a).some(([k, v]) => k.toLowerCase() === "content-type" && typeof v === "string" && v.startsWith("text/event-stream")))

/**
 * Ends `traced` with the answer written on `res` (tracing on only): its JSON-RPC error when the
 * last piece written is one, `cancelled` when the exchange closed unanswered. A `listen` span
 * (subscriptions/listen) ends as its event stream opens, `mcp_store.stream` "opened", rather than
 * when it ends (a stream may last hours; a span is exported once it ends); a refused listen ends
 * with its error.
 */
export const tapAnswer = (res: ServerResponse, traced: MethodSpan, listen: boolean): void => {
  let last: string | undefined
  const write = res.write
  const end = res.end
  const writeHead = res.writeHead
  res.write = function (this: ServerResponse, chunk: unknown, ...rest: Array<unknown>) {
    if (chunk !== undefined && typeof chunk !== "function") last = textOf(chunk)
    return (write as (...a: Array<unknown>) => boolean).call(this, chunk, ...rest)
  } as never
  res.end = function (this: ServerResponse, chunk?: unknown, ...rest: Array<unknown>) {
    if (chunk !== undefined && typeof chunk !== "function") last = textOf(chunk)
    const r = (end as (...a: Array<unknown>) => ServerResponse).call(this, chunk, ...rest)
    traced.end(res.statusCode === 499 ? { type: "cancelled", message: "the client went away before the answer" } : errorIn(last))
    return r
  } as never
  if (listen) {
    res.writeHead = function (this: ServerResponse, ...args: Array<unknown>) {
      const r = (writeHead as (...a: Array<unknown>) => ServerResponse).apply(this, args)
      if (args[0] === 200 && eventStream(args)) traced.end(undefined, true)
      return r
    } as never
  }
  res.once("close", () => {
    if (!res.writableEnded) traced.end({ type: "cancelled", message: "the client went away before the answer" })
  })
}
