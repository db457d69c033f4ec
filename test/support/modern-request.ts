/**
 * One MCP 2026-07-28 request over raw HTTP, as a sessionless client sends it: the `_meta` envelope
 * (version, client info, capabilities), `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` (the
 * body's `taskId`, `name` or `uri`), for the tests that check the store's modern wire rules byte by
 * byte rather than through an SDK client.
 */

/** The modern revision. */
export const MODERN = "2026-07-28"
/** The tasks extension's identifier. */
export const TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

/** The `_meta` envelope of a modern request. */
export const modernEnvelope = (version = MODERN, capabilities: Record<string, unknown> = {}) => ({
  "io.modelcontextprotocol/protocolVersion": version,
  "io.modelcontextprotocol/clientInfo": { name: "raw-test", version: "1.0.0" },
  "io.modelcontextprotocol/clientCapabilities": capabilities
})

/** Capabilities that declare the tasks extension. */
export const withTasks = { extensions: { [TASKS_EXTENSION]: {} } }

export interface ModernRequestOptions {
  /** An API key, sent as a bearer token. */
  readonly key?: string | undefined
  readonly version?: string | undefined
  /** The client's capabilities in the envelope. */
  readonly capabilities?: Record<string, unknown> | undefined
  /** Headers to send instead of the standard ones (`null` leaves one out). */
  readonly headers?: Record<string, string | null> | undefined
  /** The JSON-RPC id (7 by default). */
  readonly id?: string | number | undefined
  /** Ends the request (the client goes away): the answer's promise rejects. */
  readonly signal?: AbortSignal | undefined
}

/** The answer of a modern request: the HTTP status, the JSON-RPC response (the last of an event stream), every message, the headers. */
export interface ModernAnswer {
  readonly status: number
  /** Read field by field by the tests (`response.result.tools`, `response.error.code`): any JSON-RPC answer. */
  readonly response: any
  readonly messages: ReadonlyArray<Record<string, any>>
  readonly headers: Headers
}

/** Sends one modern JSON-RPC request with `params` (the envelope added to its `_meta`) to `url`. */
export const modernRequest = async (url: string, method: string, params: Record<string, unknown> = {}, options: ModernRequestOptions = {}): Promise<ModernAnswer> => {
  const version = options.version ?? MODERN
  const name = [params["taskId"], params["name"], params["uri"]].find((v): v is string => typeof v === "string")
  const headers: Record<string, string | null> = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    ...(options.key !== undefined ? { authorization: `Bearer ${options.key}` } : {}),
    "mcp-protocol-version": version,
    "mcp-method": method,
    ...(name !== undefined ? { "mcp-name": name } : {}),
    ...options.headers
  }
  const res = await fetch(url, {
    method: "POST",
    ...(options.signal !== undefined ? { signal: options.signal } : {}),
    headers: Object.fromEntries(Object.entries(headers).filter((e): e is [string, string] => e[1] !== null)),
    // The params' own `_meta` (a trace context, a progress token) beside the envelope.
    body: JSON.stringify({ jsonrpc: "2.0", id: options.id ?? 7, method, params: { ...params, _meta: { ...modernEnvelope(version, options.capabilities), ...(params["_meta"] as object | undefined) } } })
  })
  const text = await res.text()
  const messages = (res.headers.get("content-type") ?? "").startsWith("text/event-stream")
    ? text
        .split("\n")
        .filter((l) => l.startsWith("data:"))
        .map((l) => JSON.parse(l.slice(5)) as Record<string, any>)
    : text === ""
      ? []
      : [JSON.parse(text) as Record<string, any>]
  const response = messages.find((m) => "id" in m && ("result" in m || "error" in m))
  return { status: res.status, response, messages, headers: res.headers }
}
