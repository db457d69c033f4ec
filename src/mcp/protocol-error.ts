/**
 * The MCP errors of the store, on SDK v2's classes: `ProtocolError` for a JSON-RPC error that crosses
 * a wire (an upstream's answer, a refusal the store sends an upstream or a client), `SdkError` for the
 * engine's own failures that never do (a request timed out, the connection closed). One module makes
 * them, so that their messages keep the shape every face has answered with since the store's first
 * release ("MCP error <code>: <message>", as SDK 1.x's `McpError` wrote it), and so that the failure
 * classification (request.ts) reads one pair of classes, whichever SDK bundle made an instance (v2
 * matches its error classes across bundles by brand).
 */
import { ProtocolError, ProtocolErrorCode, SdkError, SdkErrorCode } from "@modelcontextprotocol/server"

export { ProtocolError, ProtocolErrorCode, SdkError }

/**
 * A JSON-RPC error of the store's own making, or an upstream's answer as the engine keeps it: its
 * code and data as they are, its message prefixed as every face has always read it.
 */
export const mcpError = (code: number, message: string, data?: unknown): ProtocolError => new ProtocolError(code, `MCP error ${code}: ${message}`, data)

/** A message of `mcpError` without its prefix: the words of the error alone. */
export const bareMessage = (error: { readonly message: string }): string => error.message.replace(/^MCP error -?\d+: /, "")

/**
 * An upstream's value quoted in a message: its JSON cut to `max` characters, or a placeholder when
 * it cannot be written at all (nested thousands deep: `JSON.stringify` throws, where a caller would
 * be left without its answer).
 */
export const excerptOf = (value: unknown, max: number): string => {
  try {
    return String(JSON.stringify(value)).slice(0, max)
  } catch {
    return "(a value too deeply nested to show)"
  }
}

/** The engine gave up waiting for an answer (its time-out): `timeout` is the time-out in ms. */
export const requestTimedOut = (timeout: number | undefined): SdkError => new SdkError(SdkErrorCode.RequestTimeout, "Request timed out", { timeout })

/** The connection closed with the request in flight, or (modern era) the server cancelled it. */
export const connectionClosed = (message: "Connection closed" | "Request was cancelled"): SdkError => new SdkError(SdkErrorCode.ConnectionClosed, message)

/** The engine's own time-out (`requestTimedOut`). */
export const isRequestTimeout = (error: unknown): boolean => error instanceof SdkError && error.code === SdkErrorCode.RequestTimeout

/**
 * The connection closed before the answer came (`connectionClosed`). A server's own -32000 answer
 * is a `ProtocolError`, never this: it stays a protocol error.
 */
export const isConnectionClosed = (error: unknown): boolean => error instanceof SdkError && error.code === SdkErrorCode.ConnectionClosed

/**
 * An upstream's JSON-RPC error answer, kept whole (code, message, data) and prefixed as `mcpError`
 * does; a URL elicitation required (-32042) keeps only its `elicitations`, as SDK 1.x kept it.
 */
export const answerError = (code: number, message: string, data: unknown): ProtocolError => {
  const elicitations = code === ProtocolErrorCode.UrlElicitationRequired && typeof data === "object" && data !== null ? (data as { elicitations?: unknown }).elicitations : undefined
  return mcpError(code, message, elicitations ? { elicitations } : data)
}
