/**
 * The one wrapper every MCP request goes through. It hands the SDK a time-out and an abort signal,
 * enforces the time-out itself as well (the SDK does not bound a transport's start, e.g. an SSE
 * stream that never sends its endpoint), and turns whatever the SDK, the transport or fetch threw
 * into an `McpRequestError` with a kind the service actors can act on and a message a person can read.
 */
import { bareMessage, isConnectionClosed, isRequestTimeout, ProtocolError } from "./protocol-error.js"
import { isSseError, isUnauthorizedError } from "./client-package.js"
import { AUTHORIZE_HINT, AuthorizationRequiredError } from "./oauth-client.js"
import { McpRequestError, MessageTooLargeError, StreamableHttpError, type CallOptions, type RequestOptions } from "./types.js"
import { type CancelSignal } from "../domain/cancellation.js"

/** What the SDK call receives: pass both on as its request options. */
export interface RequestControls {
  readonly timeout: number
  readonly signal: AbortSignal
}

const MAX_TIMER_MS = 2_147_483_647

/** Marks the wrapper's own deadline, so that it is told apart from any other abort. */
class DeadlineExceeded extends Error {
  constructor(readonly timeoutMs: number) {
    super(`no answer within ${timeoutMs} ms`)
  }
}

/**
 * Runs one MCP request (or a short sequence, like paging through tools/list) with a time-out and
 * the caller's abort signal. Settles at the time-out at the latest, and always rejects with an
 * `McpRequestError`:
 * - `aborted` when the caller's signal fired;
 * - `timeout` when no answer came in time (the SDK then sends `notifications/cancelled`);
 * - `session_expired` when a Streamable HTTP server answered 404 (it forgot the session);
 * - `protocol` when the server answered with a JSON-RPC error (`code` and `data` are kept);
 * - `message_too_large` when the answer was over the connection's message size limit;
 * - `transport` for everything else (connection closed or refused, process gone, HTTP errors).
 */
export async function mcpRequest<T>(
  what: string,
  run: (controls: RequestControls) => Promise<T>,
  options: RequestOptions
): Promise<T> {
  const { signal } = options
  // setTimeout treats anything above 2^31-1 ms as 1 ms.
  const timeoutMs = Math.max(0, Math.min(options.timeoutMs, MAX_TIMER_MS))
  if (signal?.aborted === true) throw abortedError(what, signal.reason)
  // A signal of its own per request: the SDK never removes the abort listener it adds, so a
  // long-lived caller signal (a service's) would collect one per request.
  const controller = new AbortController()
  let timer: NodeJS.Timeout | undefined
  let onCallerAbort: (() => void) | undefined
  // One promise settles the race on the deadline or the caller's abort; either aborts the SDK's
  // signal too, which lets the SDK drop the request and tell the server it was cancelled.
  const stopped = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const error = new DeadlineExceeded(timeoutMs)
      controller.abort(error)
      reject(error)
    }, timeoutMs)
    if (signal !== undefined) {
      onCallerAbort = () => {
        controller.abort(signal.reason)
        reject(signal.reason)
      }
      signal.addEventListener("abort", onCallerAbort, { once: true })
    }
  })
  try {
    return await Promise.race([run({ timeout: timeoutMs, signal: controller.signal }), stopped])
  } catch (error) {
    throw classifyFailure(what, error, options)
  } finally {
    clearTimeout(timer)
    if (onCallerAbort !== undefined) signal?.removeEventListener("abort", onCallerAbort)
  }
}

/**
 * Runs one request that bounds itself: it settles at its time-out at the latest and when the
 * caller's signal fires (tools/call and ping of src/mcp/session.ts), so no timer or signal of the
 * wrapper's own is needed. Rejects with an `McpRequestError`, classified as `mcpRequest` does.
 */
export async function mcpBoundedRequest<T>(
  what: string,
  run: (timeoutMs: number, signal: CancelSignal | undefined) => Promise<T>,
  options: CallOptions
): Promise<T> {
  const { signal } = options
  if (signal?.aborted === true) throw abortedError(what, signal.reason)
  try {
    return await run(Math.max(0, Math.min(options.timeoutMs, MAX_TIMER_MS)), signal)
  } catch (error) {
    throw classifyFailure(what, error, options)
  }
}

/** Turns anything a request threw into an `McpRequestError` (see `mcpRequest` for the kinds). */
export function classifyFailure(what: string, error: unknown, options: RequestOptions | CallOptions): McpRequestError {
  if (error instanceof McpRequestError) return error
  if (options.signal?.aborted === true) return abortedError(what, options.signal.reason)
  if (error instanceof MessageTooLargeError) {
    return new McpRequestError("message_too_large", `${what}: ${error.message}`)
  }
  if (error instanceof AuthorizationRequiredError || isUnauthorizedError(error)) {
    // Only a user can help (src/mcp/oauth-client.ts): no retry until authorize_service.
    return new McpRequestError("transport", `${what}: ${error.message}`, undefined, undefined, {
      permanent: true,
      authorizationRequired: true,
      httpStatus: 401,
      hint: AUTHORIZE_HINT
    })
  }
  if (error instanceof DeadlineExceeded) {
    return new McpRequestError("timeout", `${what}: ${error.message}`)
  }
  if (isRequestTimeout(error)) {
    return new McpRequestError("timeout", `${what}: no answer within ${options.timeoutMs} ms`)
  }
  if (isConnectionClosed(error)) {
    return new McpRequestError("transport", `${what}: the connection closed before the answer came`)
  }
  if (error instanceof ProtocolError) {
    return new McpRequestError("protocol", `${what}: the server answered with error ${error.code}: ${bareMessage(error)}`, error.code, error.data)
  }
  if (error instanceof StreamableHttpError) {
    if (error.code === 404) {
      return new McpRequestError(
        "session_expired",
        `${what}: the server no longer knows this session (HTTP 404): ${describeError(error)}`,
        undefined,
        undefined,
        { httpStatus: 404 }
      )
    }
    const status = error.code !== undefined && error.code > 0 ? ` (HTTP ${error.code})` : ""
    return new McpRequestError("transport", `${what}: HTTP request failed${status}: ${describeError(error)}`, undefined, undefined, {
      httpStatus: error.code !== undefined && error.code > 0 ? error.code : undefined
    })
  }
  if (isSseError(error)) {
    const status = error.code !== undefined ? ` (HTTP ${error.code})` : ""
    return new McpRequestError("transport", `${what}: SSE stream failed${status}: ${describeError(error)}`, undefined, undefined, {
      httpStatus: error.code !== undefined && error.code > 0 ? error.code : undefined
    })
  }
  if (isSchemaError(error)) {
    return new McpRequestError("protocol", `${what}: the server's answer does not match the MCP schema: ${describeError(error)}`)
  }
  return new McpRequestError("transport", `${what}: ${describeError(error)}`)
}

/**
 * A readable one-line account of an error and its causes, e.g.
 * "fetch failed: connect ECONNREFUSED 127.0.0.1:4000".
 */
export function describeError(error: unknown): string {
  const parts: Array<string> = []
  let current: unknown = error
  for (let depth = 0; depth < 5 && current !== undefined && current !== null; depth++) {
    if (current instanceof AggregateError && current.errors.length > 0) {
      // Happy eyeballs: one refusal per address tried.
      const inner = [...new Set(current.errors.map((e) => describeError(e)))].join("; ")
      parts.push(current.message !== "" ? `${current.message}: ${inner}` : inner)
      break
    }
    if (current instanceof Error) {
      const code = (current as NodeJS.ErrnoException).code
      const message = current.message !== "" ? current.message : current.name
      parts.push(typeof code === "string" && !message.includes(code) ? `${message} (${code})` : message)
      current = current.cause
    } else {
      parts.push(String(current))
      break
    }
  }
  // "fetch failed: connect ECONNREFUSED ..." reads better than repeating a cause already named.
  return parts.filter((part, i) => i === 0 || !parts[i - 1]?.includes(part)).join(": ")
}

const abortedError = (what: string, reason: unknown): McpRequestError => {
  const why = reason === undefined ? "" : `: ${reason instanceof Error ? reason.message : String(reason)}`
  return new McpRequestError("aborted", `${what}: aborted by the caller${why}`)
}

const isSchemaError = (error: unknown): boolean => error instanceof Error && /ZodError$/.test(error.name)
