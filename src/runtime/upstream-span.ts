/**
 * The client span of one upstream request the store makes for a request it serves, beside a tool
 * call's (calls.ts, `traceCall`): resources/read, prompts/get and completion/complete
 * (catalog.ts), and the tasks extension's tasks/get, tasks/update and tasks/cancel
 * (task-relay.ts). Made only with tracing on: a new span under the request's span (the parent
 * given, else a trace of its own), whose context the upstream is sent in the request's `_meta`
 * (and, over HTTP, in its `traceparent` header: src/mcp/http-transport.ts), recorded once the
 * upstream answered, with the MCP conventions' attributes and the store's under `mcp_store.`.
 */
import { Cause, Exit, Option } from "effect"
import { callSpan, traceMeta, type TraceContext } from "../domain/trace-context.js"
import { UpstreamError } from "../domain/errors.js"
import type { SpanAttributes, Tracer } from "../logging/tracing.js"
import type { McpConnection } from "../mcp/types.js"

/** One upstream request's span, open: its context, the `_meta` entries that carry it, and `end`. */
export interface UpstreamSpan {
  readonly span: TraceContext
  readonly meta: Record<string, string>
  /**
   * Records the span with how the request ended (a failure: the store's error class as `error.type`,
   * and the upstream's JSON-RPC error code, `code` or the UpstreamError's, as `rpc.response.status_code`).
   */
  end(exit: Exit.Exit<unknown, unknown>, code?: number): void
}

/** What an upstream request is, for its span. */
export interface UpstreamRequest {
  /** The MCP method sent: `resources/read`. */
  readonly method: string
  /** The span name's target (the prompt's own name for prompts/get), low cardinality only. */
  readonly target?: string | undefined
  readonly scope: string
  readonly serviceName: string
  readonly connection: McpConnection | undefined
  /** More attributes (`mcp.resource.uri`, `gen_ai.prompt.name`). */
  readonly attributes?: SpanAttributes | undefined
}

/** Opens the span of an upstream request under `parent` (tracing on only: the caller checks `tracer.enabled`). */
export const openUpstreamSpan = (tracer: Tracer, parent: TraceContext | undefined, request: UpstreamRequest): UpstreamSpan => {
  const span = callSpan(parent)
  const startMs = performance.now()
  return {
    span,
    meta: traceMeta(span),
    end: (exit, code) => {
      const failure = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
      const errorType = Exit.isSuccess(exit) ? undefined : failure === undefined ? (Cause.isInterruptedOnly(exit.cause) ? "cancelled" : "_OTHER") : errorTypeOf(failure)
      const connection = request.connection
      tracer.record({
        name: request.target === undefined ? request.method : `${request.method} ${request.target}`,
        kind: "client",
        context: span,
        startMs,
        endMs: performance.now(),
        attributes: {
          "mcp.method.name": request.method,
          "mcp.protocol.version": connection?.protocolVersion,
          "network.transport": connection === undefined ? undefined : connection.transportType === "stdio" ? "pipe" : "tcp",
          ...request.attributes,
          "rpc.response.status_code": code !== undefined ? String(code) : failure instanceof UpstreamError && failure.code !== undefined ? String(failure.code) : undefined,
          "error.type": errorType,
          "mcp_store.scope": request.scope,
          "mcp_store.service.name": request.serviceName
        },
        ...(errorType === undefined ? {} : { error: messageOf(failure) ?? errorType })
      })
    }
  }
}

const errorTypeOf = (failure: unknown): string => {
  const tag = (failure as { _tag?: unknown } | undefined)?._tag
  return typeof tag === "string" ? tag : "_OTHER"
}

const messageOf = (failure: unknown): string | undefined => {
  const message = (failure as { message?: unknown } | undefined)?.message
  return typeof message === "string" ? message : undefined
}
