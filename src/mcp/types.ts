/**
 * The contract between the service actors and a live MCP connection. The machines only ever see
 * these types; src/mcp implements them over the SDK's transports.
 */
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js"

/** A tool as its server lists it (name unchanged). */
export interface ToolInfo {
  readonly name: string
  readonly description: string
  readonly inputSchema: Record<string, unknown>
  readonly annotations?: Record<string, unknown>
}

/** Options every MCP request takes: a time-out and an optional abort signal. */
export interface RequestOptions {
  readonly timeoutMs: number
  readonly signal?: AbortSignal | undefined
}

/**
 * How an MCP request failed:
 * - `transport`: the connection broke or could not be made (process exited, socket refused, stream ended);
 * - `session_expired`: the server no longer knows the session (Streamable HTTP 404); reconnect and retry;
 * - `protocol`: the server answered with a JSON-RPC error (`code` is set; -32602 means invalid params);
 * - `timeout`: no answer within the time-out;
 * - `aborted`: the caller's signal fired.
 */
export type FailureKind = "transport" | "session_expired" | "protocol" | "timeout" | "aborted"

/** The one error type that every MCP request fails with. */
export class McpRequestError extends Error {
  readonly _tag = "McpRequestError"
  constructor(
    readonly kind: FailureKind,
    message: string,
    readonly code?: number,
    readonly data?: unknown
  ) {
    super(message)
  }
}

/** A live connection to one MCP server. Owned by exactly one service actor. */
export interface McpConnection {
  readonly transportType: "streamable_http" | "sse" | "stdio"
  /** Server name/version from the initialize handshake. */
  readonly serverInfo: { readonly name: string; readonly version: string } | undefined
  /** MCP ping; resolves with the round-trip time in milliseconds. */
  ping(options: RequestOptions): Promise<number>
  /** Lists every tool (follows pagination cursors). */
  listTools(options: RequestOptions): Promise<ReadonlyArray<ToolInfo>>
  /** Calls a tool. A result with `isError: true` resolves normally; only request failures reject. */
  callTool(name: string, args: Record<string, unknown>, options: RequestOptions): Promise<CallToolResult>
  /**
   * Ends the connection: Streamable HTTP sends the session DELETE first; stdio ends the child's
   * whole process group (SIGTERM, then SIGKILL after a grace period). Idempotent; never rejects.
   */
  close(): Promise<void>
  /** Called once when the transport closes by itself (process exit, stream end). Returns an unsubscribe. */
  onClose(listener: (reason: string) => void): () => void
  /** Called on `notifications/tools/list_changed`. Returns an unsubscribe. */
  onToolsChanged(listener: () => void): () => void
  /** The last lines (up to 200) the local process wrote to stderr; empty for remote services. */
  stderrTail(): ReadonlyArray<string>
  /** The local process id, if any. */
  readonly pid: number | undefined
}

/** Options for opening a connection. */
export interface ConnectOptions extends RequestOptions {
  /** Client name sent in the initialize handshake. */
  readonly clientName?: string
}
