/**
 * Opens a live MCP connection for a resolved service definition. Each call builds a new SDK client
 * and transport (a reconnection never reuses either; Streamable HTTP runs on the store's own
 * transport, src/mcp/http-transport.ts, SSE and stdio on the SDK's and src/mcp/stdio.ts), runs every request through `mcpRequest`, and
 * hides the transports' differences behind `McpConnection`: the session DELETE for Streamable HTTP,
 * the process group and stderr for stdio, "closed by itself" against "closed by us".
 *
 * Every transport reads at most `maxMessageBytes` per message (SSE through `boundedFetch`). A
 * message over it closes the connection; the requests it fails, and the close itself, then name
 * that cause (`message_too_large`) rather than a mere closed connection. The SDK's own checks of
 * tool outputs run on the store's linear-time validators (src/mcp/json-schema.ts).
 *
 * A failed connect is classified here, at the transport edge: a failure that retrying soon cannot
 * mend (the executable does not exist or cannot be run, the URL answers the first initialize with
 * 404 or 405) is marked `permanent`, with a hint for the user (`permanentFailure`).
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js"
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js"
import type { JsonSchemaType } from "@modelcontextprotocol/sdk/validation/types.js"
import { ToolListChangedNotificationSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js"
import { maskArgs, maskUrl } from "../domain/secrets.js"
import type { ResolvedDefinition } from "../domain/service.js"
import { boundedFetch } from "./bounded-fetch.js"
import { DEFAULT_UPSTREAM_POLICY, UpstreamRefused, type UpstreamPolicy } from "./upstream-policy.js"
import { DirectRequests } from "./direct.js"
import { HttpClientTransport } from "./http-transport.js"
import { upstreamSchemaValidator } from "./json-schema.js"
import { mcpBoundedRequest, mcpRequest, type RequestControls } from "./request.js"
import { describeExit, StdioProcessTransport } from "./stdio.js"
import {
  DEFAULT_MAX_MESSAGE_BYTES,
  McpRequestError,
  MessageTooLargeError,
  type CallOptions,
  type CancelSignal,
  type ConnectOptions,
  type McpConnection,
  type RequestOptions,
  type ToolInfo
} from "./types.js"

/** Client name sent in the initialize handshake when none is given. */
export const DEFAULT_CLIENT_NAME = "mcp-store"

/** How long `close()` waits for the Streamable HTTP session DELETE. */
const TERMINATE_SESSION_TIMEOUT_MS = 1_000

/** How many stderr lines a failed stdio connect quotes in its message. */
const STDERR_LINES_IN_ERRORS = 10

/** What to do about a refused upstream address. */
const UPSTREAM_HINT = "point the service at an allowed address, or widen --upstream-allow (--upstream-allow-metadata for metadata addresses)"

/** Stops a misbehaving server that keeps handing out cursors. */
const MAX_TOOL_PAGES = 1_000

/** How much of an SSE service's error answer is kept (as the Streamable HTTP transport does): no oracle for a hostile URL. */
const ERROR_BODY_BYTES = 200

type Opened =
  | { readonly type: "streamable_http"; readonly transport: HttpClientTransport }
  | { readonly type: "sse"; readonly transport: SSEClientTransport }
  | { readonly type: "stdio"; readonly transport: StdioProcessTransport }

/**
 * Connects to a service: builds a new client and transport, runs the initialize handshake within
 * the time-out, and returns the live connection. When anything fails, everything it created is
 * released (a local process group is ended) and it rejects with `McpRequestError`; for stdio the
 * message tells how the process ended and quotes its last stderr lines.
 */
export async function connect(def: ResolvedDefinition, options: ConnectOptions): Promise<McpConnection> {
  const policy = options.upstream ?? DEFAULT_UPSTREAM_POLICY
  if (def.kind === "remote") {
    try {
      policy.checkUrl(new URL(def.url))
      if (def.transport === "sse") await policy.checkResolved(new URL(def.url))
    } catch (e) {
      if (!(e instanceof UpstreamRefused)) throw new McpRequestError("transport", `connect to ${describeTarget(def)}: ${String((e as Error).message)}`)
      throw new McpRequestError("transport", e.message, undefined, undefined, { permanent: true, hint: UPSTREAM_HINT })
    }
  }
  const opened = openTransport(def, options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES, policy)
  const client = new Client(
    { name: options.clientName ?? DEFAULT_CLIENT_NAME, version: "1.0.0" },
    { capabilities: {}, jsonSchemaValidator: upstreamSchemaValidator }
  )
  const connection = new SdkConnection(client, opened)
  try {
    await connection.request(
      `connect to ${describeTarget(def)}`,
      ({ timeout, signal }) => client.connect(opened.transport, { timeout, signal }),
      options
    )
  } catch (error) {
    const failure = error instanceof McpRequestError ? error : new McpRequestError("transport", String(error))
    if (opened.type === "stdio" && failure.kind === "transport") {
      // A broken pipe can be noticed a moment before the exit itself (longer on a loaded machine).
      await opened.transport.waitForExit(1000)
    }
    // The SDK may close the transport on the failed write before the exit is seen; a process that
    // exited with a code (no signal of ours) still ended by itself.
    const exit = opened.type === "stdio" ? opened.transport.exit : undefined
    const ended =
      opened.type === "stdio" &&
      (opened.transport.endedByItself || (exit?.kind === "exited" && exit.signal === null))
    await connection.close()
    const spawnError = opened.type === "stdio" && exit?.kind === "spawn_failed" ? exit.error : undefined
    const permanent = permanentFailure(def, failure, spawnError)
    const message =
      permanent?.message ?? (opened.type === "stdio" ? withProcessReport(failure.message, opened.transport, ended) : failure.message)
    const hint = permanent?.hint ?? (opened.type === "stdio" ? stdioHint(opened.transport.stderrTail()) : undefined)
    if (message === failure.message && hint === undefined) throw failure
    throw new McpRequestError(failure.kind, message, failure.code, failure.data, {
      permanent: permanent !== undefined,
      hint,
      httpStatus: failure.httpStatus
    })
  }
  connection.direct = new DirectRequests(opened.transport, upstreamSchemaValidator)
  return connection
}

/** One live client, its transport, and the listeners of the connection's owner. */
class SdkConnection implements McpConnection {
  readonly transportType: "streamable_http" | "sse" | "stdio"
  private readonly closeListeners = new Set<(reason: string) => void>()
  private readonly toolsListeners = new Set<() => void>()
  private closedByUs = false
  private closing: Promise<void> | undefined
  private selfCloseReason: string | undefined
  /** The message over the size limit that ended the connection, if one did. */
  private tooLarge: MessageTooLargeError | undefined
  /** tools/call and ping, beside the Client once it has connected (src/mcp/direct.ts). */
  direct: DirectRequests | undefined

  constructor(
    private readonly client: Client,
    private readonly opened: Opened
  ) {
    this.transportType = opened.type
    client.onclose = () => this.onTransportClosed()
    // Transport hiccups (a dropped SSE stream, a stray stdout line) are not failures by themselves:
    // a failing request or the close is what the owner acts on. A message over the size limit is
    // noted: the transport closes right after it, and the failures that follow carry its name.
    client.onerror = (error) => {
      if (error instanceof MessageTooLargeError) this.tooLarge ??= error
    }
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      for (const listener of [...this.toolsListeners]) listener()
    })
  }

  get serverInfo(): { readonly name: string; readonly version: string } | undefined {
    const info = this.client.getServerVersion()
    return info === undefined ? undefined : { name: info.name, version: info.version }
  }

  get pid(): number | undefined {
    return this.opened.type === "stdio" ? this.opened.transport.pid : undefined
  }

  /**
   * Runs one request through `mcpRequest`. A transport failure on a connection that a message
   * over the size limit ended is that failure: `message_too_large`.
   */
  async request<T>(what: string, run: (controls: RequestControls) => Promise<T>, options: RequestOptions): Promise<T> {
    try {
      return await mcpRequest(what, run, options)
    } catch (error) {
      throw this.named(what, error)
    }
  }

  /** The same for a direct request (src/mcp/direct.ts), which bounds itself. */
  private async directRequest<T>(what: string, run: (direct: DirectRequests, timeoutMs: number, signal: CancelSignal | undefined) => Promise<T>, options: CallOptions): Promise<T> {
    const direct = this.direct
    if (direct === undefined) throw new McpRequestError("transport", `${what}: not connected`)
    try {
      return await mcpBoundedRequest(what, (timeoutMs, signal) => run(direct, timeoutMs, signal), options)
    } catch (error) {
      throw this.named(what, error)
    }
  }

  /** A transport failure on a connection that a message over the size limit ended is that failure. */
  private named(what: string, error: unknown): unknown {
    const tooLarge = this.tooLarge
    if (tooLarge === undefined || !(error instanceof McpRequestError) || error.kind !== "transport") return error
    return new McpRequestError("message_too_large", `${what}: ${tooLarge.message}`)
  }

  async ping(options: CallOptions): Promise<number> {
    const started = performance.now()
    await this.directRequest("ping", (direct, timeoutMs, signal) => direct.ping(timeoutMs, signal), options)
    return performance.now() - started
  }

  listTools(options: RequestOptions): Promise<ReadonlyArray<ToolInfo>> {
    return this.request(
      "tools/list",
      async ({ timeout, signal }) => {
        const tools: Array<ToolInfo> = []
        const seen = new Set<string>()
        let cursor: string | undefined
        const terms: Array<{ name: string; outputSchema?: JsonSchemaType | undefined; taskSupport?: string | undefined }> = []
        for (let page = 0; page < MAX_TOOL_PAGES; page++) {
          const result = await this.client.listTools(cursor === undefined ? {} : { cursor }, { timeout, signal })
          for (const tool of result.tools) {
            tools.push(toToolInfo(tool))
            terms.push({ name: tool.name, outputSchema: tool.outputSchema as JsonSchemaType | undefined, taskSupport: tool.execution?.taskSupport })
          }
          cursor = result.nextCursor
          if (cursor === undefined) {
            this.direct?.setTools(terms)
            return tools
          }
          if (seen.has(cursor)) {
            throw new McpRequestError("protocol", `tools/list: the server repeated the cursor ${JSON.stringify(cursor)}`)
          }
          seen.add(cursor)
        }
        throw new McpRequestError("protocol", `tools/list: more than ${MAX_TOOL_PAGES} pages`)
      },
      options
    )
  }

  callTool(name: string, args: Record<string, unknown>, options: CallOptions): Promise<CallToolResult> {
    return this.directRequest(`tools/call ${JSON.stringify(name)}`, (direct, timeoutMs, signal) => direct.callTool(name, args, timeoutMs, signal), options)
  }

  close(): Promise<void> {
    this.closing ??= this.shutDown()
    return this.closing
  }

  onClose(listener: (reason: string) => void): () => void {
    const reason = this.selfCloseReason
    if (reason !== undefined) {
      // Already closed by itself: tell a late subscriber at once rather than never.
      queueMicrotask(() => listener(reason))
      return () => {}
    }
    this.closeListeners.add(listener)
    return () => this.closeListeners.delete(listener)
  }

  onToolsChanged(listener: () => void): () => void {
    this.toolsListeners.add(listener)
    return () => this.toolsListeners.delete(listener)
  }

  stderrTail(): ReadonlyArray<string> {
    return this.opened.type === "stdio" ? this.opened.transport.stderrTail() : []
  }

  private async shutDown(): Promise<void> {
    this.closedByUs = true
    this.closeListeners.clear()
    if (this.opened.type === "streamable_http") {
      // client.close() sends no DELETE; ending the session is our job, and must not hold up the close.
      await withTimeout(this.opened.transport.terminateSession(), TERMINATE_SESSION_TIMEOUT_MS)
    }
    await this.client.close().catch(() => {})
    // Closing an unconnected client does not reach the transport (a connect that failed early).
    await this.opened.transport.close().catch(() => {})
  }

  private onTransportClosed(): void {
    if (this.closedByUs || this.selfCloseReason !== undefined) return
    const reason =
      this.tooLarge !== undefined
        ? `the server sent a message too large: ${this.tooLarge.message}`
        : this.opened.type === "stdio"
          ? closeReasonOfProcess(this.opened.transport)
          : `the ${this.opened.type === "sse" ? "SSE stream" : "connection"} closed`
    this.selfCloseReason = reason
    const listeners = [...this.closeListeners]
    this.closeListeners.clear()
    for (const listener of listeners) listener(reason)
  }
}

const openTransport = (def: ResolvedDefinition, maxMessageBytes: number, policy: UpstreamPolicy): Opened => {
  if (def.kind === "local") {
    return {
      type: "stdio",
      transport: new StdioProcessTransport({ command: def.command, args: def.args, env: def.env, cwd: def.cwd, maxMessageBytes })
    }
  }
  const url = new URL(def.url)
  if (def.transport !== "sse") {
    return { type: "streamable_http", transport: new HttpClientTransport(url, def.headers, { maxMessageBytes, lookup: policy.lookup }) }
  }
  const fetch = boundedFetch({
    maxMessageBytes,
    // fetch cannot be given a lookup without undici's Agent: the host is resolved and checked before each request.
    fetch: (input, init) => policy.checkResolved(new URL(input instanceof Request ? input.url : String(input))).then(() => globalThis.fetch(input, init)),
    errorBodyBytes: ERROR_BODY_BYTES,
    onTooLarge: (error) => {
      // Reported as the other transports do, then closed once the event source has seen its body
      // fail (it rejects a start still waiting for the endpoint), so that it does not reconnect.
      transport.onerror?.(error)
      setImmediate(() => void transport.close())
    }
  })
  const transport: SSEClientTransport = new SSEClientTransport(url, { requestInit: { headers: { ...def.headers } }, fetch })
  return { type: "sse", transport }
}

/**
 * A connect failure that retrying soon cannot mend, with what to do about it; undefined for the
 * others (a refused connection, a time-out, a process that exited: all may pass).
 */
export const permanentFailure = (
  def: ResolvedDefinition,
  failure: McpRequestError,
  spawnError: Error | undefined
): { readonly message: string; readonly hint: string } | undefined => {
  if (def.kind === "local") {
    const code = (spawnError as NodeJS.ErrnoException | undefined)?.code
    if (spawnError === undefined || (code !== "ENOENT" && code !== "EACCES" && code !== "ENOTDIR")) return undefined
    const message = failure.message.split("\n", 1)[0] as string
    if (/working directory .* does not exist/.test(spawnError.message)) {
      return { message, hint: `the working directory "cwd" does not exist: create it or fix "cwd"` }
    }
    if (code === "ENOENT" && def.args.length === 0 && /\s/.test(def.command.trim())) {
      const [program, ...rest] = def.command.trim().split(/\s+/)
      return {
        message,
        hint: `command contains spaces: put the arguments in "args" (e.g. "command": ${JSON.stringify(program)}, "args": ${JSON.stringify(rest)})`
      }
    }
    if (code === "EACCES") return { message, hint: `${JSON.stringify(def.command)} cannot be run: check that it is an executable file (chmod +x)` }
    return {
      message,
      hint: def.command.includes("/")
        ? `no executable at ${JSON.stringify(def.command)}: check the path`
        : `executable ${JSON.stringify(def.command)} not found on the store's PATH: install it or give its full path`
    }
  }
  if (failure.message.includes("upstream refused: ")) return { message: failure.message, hint: UPSTREAM_HINT }
  const status = failure.httpStatus
  if (status === 404) {
    return {
      message: `${describeTarget(def)}: the first initialize was answered HTTP 404 (no MCP endpoint at this URL)`,
      hint: `check the URL's path (MCP servers usually serve ${def.transport === "sse" ? "/sse" : "/mcp"})`
    }
  }
  if (status === 405) {
    return {
      message: `${describeTarget(def)}: the first initialize was answered HTTP 405 (method not allowed)`,
      hint:
        def.transport === "sse"
          ? `the URL does not serve an SSE stream: check its path, or drop "transport": "sse" for a Streamable HTTP server`
          : `the URL does not take MCP requests: if it is an SSE server, set "transport": "sse"; otherwise check its path`
    }
  }
  return undefined
}

/** A hint from a local process's last stderr lines, for failures that are not permanent. */
const stdioHint = (tail: ReadonlyArray<string>): string | undefined => {
  const text = tail.slice(-STDERR_LINES_IN_ERRORS).join("\n")
  if (/npm (ERR!|error) (code E404|404)/.test(text)) return "npm cannot find the package: check its name (and version) in \"args\""
  if (/command not found|not found: /.test(text) && /^sh: |: not found$/m.test(text)) return "a program the command runs is not installed"
  return undefined
}

/** The service as a message names it, its secrets masked (src/domain/secrets.ts). */
const describeTarget = (def: ResolvedDefinition): string =>
  def.kind === "local"
    ? `stdio service (${[def.command, ...maskArgs(def.args)].join(" ")})`
    : `${def.transport === "sse" ? "SSE" : "Streamable HTTP"} service at ${maskUrl(def.url)}`

/** Every MCP field of a listed tool, unchanged (the optional ones only when the server sent them). */
const toToolInfo = (tool: {
  name: string
  title?: string | undefined
  description?: string | undefined
  inputSchema: Record<string, unknown>
  outputSchema?: Record<string, unknown> | undefined
  annotations?: Record<string, unknown> | undefined
  execution?: Record<string, unknown> | undefined
  _meta?: Record<string, unknown> | undefined
}): ToolInfo => ({
  name: tool.name,
  ...(tool.title !== undefined ? { title: tool.title } : {}),
  description: tool.description ?? "",
  inputSchema: tool.inputSchema,
  ...(tool.outputSchema !== undefined ? { outputSchema: tool.outputSchema } : {}),
  ...(tool.annotations !== undefined ? { annotations: tool.annotations } : {}),
  ...(tool.execution !== undefined ? { execution: tool.execution } : {}),
  ...(tool._meta !== undefined ? { _meta: tool._meta } : {})
})

const closeReasonOfProcess = (transport: StdioProcessTransport): string => {
  const last = transport.stderrTail().at(-1)
  return `the process ${describeExit(transport.exit)}${last !== undefined && last !== "" ? ` (last stderr line: ${last})` : ""}`
}

const withProcessReport = (message: string, transport: StdioProcessTransport, endedByItself: boolean): string => {
  // A process that never started has neither an exit code nor stderr: the spawn error says it all.
  if (transport.exit?.kind === "spawn_failed") return message
  const lines: Array<string> = [message]
  if (endedByItself) lines.push(`The process ${describeExit(transport.exit)}.`)
  const tail = transport.stderrTail().slice(-STDERR_LINES_IN_ERRORS)
  lines.push(tail.length > 0 ? `Last stderr lines:\n${tail.map((l) => `  ${l}`).join("\n")}` : "It wrote nothing to stderr.")
  return lines.join("\n")
}

const withTimeout = async (promise: Promise<unknown>, ms: number): Promise<void> => {
  let timer: NodeJS.Timeout | undefined
  await Promise.race([
    promise.catch(() => {}),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms)
    })
  ])
  clearTimeout(timer)
}
