/**
 * The Streamable HTTP client transport of the store's connections, in place of the SDK's
 * `StreamableHTTPClientTransport`: the same protocol (one POST per message answered with JSON, an
 * event stream or 202; the standalone GET event stream once the session is initialized, resumed with
 * Last-Event-ID; the session id and protocol version headers; DELETE to end the session), on
 * node:http with keep-alive agents shared by the connections to one origin, and a small
 * event-stream parser.
 *
 * Why: the SDK's transport runs on fetch and web streams; in the benchmark it was 40 % of the
 * store's CPU per tool call, and fetch leaves an abort listener per request on the transport's one
 * signal. An HTTP failure is a `StreamableHttpError` with the status (types.ts), a socket failure
 * Node's own error; `mcpRequest` classifies both.
 *
 * Hostile or broken servers: every read is bounded. One message (a JSON answer, one event of an
 * event stream) over `maxMessageBytes` stops the reading at once (the response is destroyed),
 * is reported through `onerror` as `MessageTooLargeError`, and closes the transport, so the
 * requests waiting on it fail and the service reconnects. Error answers keep their status line
 * and at most 200 characters of their body. A request the SDK cancels (time-out, caller gone: `notifications/cancelled`) has
 * its HTTP request destroyed, so nothing goes on reading its body.
 *
 * OAuth (src/mcp/oauth-client.ts): with an `auth`, each request carries the service's bearer token, and a
 * 401 with a `WWW-Authenticate: Bearer` challenge asks it for a new token (refresh, client
 * credentials) and is sent once more; when only a user can help, the request fails with
 * `AuthorizationRequiredError` (the service then waits for authorize_service). A 401 without a
 * bearer challenge stays a plain HTTP failure.
 *
 * The modern era (revision 2026-07-28, once `setProtocolVersion` names it): no session, no GET
 * stream; each request's POST carries `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` taken from
 * its body (so does the era probe, a `server/discover` sent before any era is known); a request is
 * cancelled by closing its POST (no `notifications/cancelled` is posted); and an error answer (400,
 * 404) whose body is the JSON-RPC error of the request is that request's answer. A tools/call also
 * carries the `Mcp-Param-{Name}` headers of its tool's `x-mcp-header` parameters (`setParamHeaders`).
 *
 * Not supported: following redirects (a 3xx answer fails the request and names the new location).
 */
import { AsyncResource } from "node:async_hooks"
import { Agent as HttpAgent, request as httpRequest, type ClientRequest, type IncomingHttpHeaders, type IncomingMessage } from "node:http"
import { Agent as HttpsAgent, request as httpsRequest } from "node:https"
import type { LookupFunction, Socket } from "node:net"
import { urlToHttpOptions } from "node:url"
import type { JSONRPCMessage, MessageExtraInfo, Transport, TransportSendOptions } from "@modelcontextprotocol/client"
import { isModernVersion } from "../domain/protocol-versions.js"
import { PROTOCOL_VERSION_META_KEY } from "./era.js"
import { paramHeaderText, valueAt, type ParamHeader } from "./param-headers.js"
import { parseBearerChallenge, type UpstreamAuth } from "./oauth-client.js"
import { excerptOf } from "./protocol-error.js"
import { describeError } from "./request.js"
import { DEFAULT_MAX_MESSAGE_BYTES, MessageTooLargeError, StreamableHttpError, TASK_METHODS, type AnswerLost, type CarriedBy } from "./types.js"

/** Reconnection of the GET event stream, as the SDK's defaults: 1 s, x1.5, at most 30 s, 2 retries. */
const RECONNECT = { initialMs: 1_000, growth: 1.5, maxMs: 30_000, maxRetries: 2 } as const

/** How much of an error answer's body is kept for its message: enough to read, too little to be an SSRF oracle. */
const ERROR_BODY_CHARS = 200

/**
 * The requests that may run twice: reads, settings, subscriptions, the handshake and the task
 * queries, sent again on a new connection when a kept-alive one turns out to be closed. Any other
 * request (a tool call, a task's cancellation or update, a method the store does not know) is sent
 * once: a connection reset after it was written may come after the server read it.
 */
const REPEATABLE = new Set([
  "initialize",
  "ping",
  "server/discover",
  "tools/list",
  "resources/list",
  "resources/templates/list",
  "resources/read",
  "resources/subscribe",
  "resources/unsubscribe",
  "prompts/list",
  "prompts/get",
  "completion/complete",
  "logging/setLevel",
  "subscriptions/listen",
  "tasks/get",
  "tasks/list",
  "tasks/result"
])

/**
 * Keep-alive agents, one per origin, shared by every connection to it and ended with the last one.
 * Servers close a kept-alive socket after a few seconds idle (Node's default is 5 s): one agent per
 * connection would open a new TCP connection for each health check of an idle service, while
 * services on the same server, sharing one agent, keep each other's sockets warm.
 */
class SharedAgents {
  private readonly byOrigin = new Map<string, { readonly agent: HttpAgent; users: number }>()

  acquire(url: URL): HttpAgent {
    let entry = this.byOrigin.get(url.origin)
    if (entry === undefined) {
      const options = { keepAlive: true, scheduling: "lifo" } as const
      const agent = url.protocol === "https:" ? new HttpsAgent(options) : new HttpAgent(options)
      agent.on("free", (socket: Socket) => idleSince.set(socket, performance.now()))
      entry = { agent, users: 0 }
      this.byOrigin.set(url.origin, entry)
    }
    entry.users += 1
    return entry.agent
  }

  release(url: URL): void {
    const entry = this.byOrigin.get(url.origin)
    if (entry === undefined || --entry.users > 0) return
    this.byOrigin.delete(url.origin)
    entry.agent.destroy()
  }

  /** Origins with an agent (for tests). */
  get size(): number {
    return this.byOrigin.size
  }

  /** Kept-alive sockets idle in the agent of `url`'s origin (for tests). */
  idleSockets(url: string): number {
    const free = this.byOrigin.get(new URL(url).origin)?.agent.freeSockets ?? {}
    return Object.values(free).reduce((n, sockets) => n + (sockets?.length ?? 0), 0)
  }
}

export const sharedAgents = new SharedAgents()

/** When each kept-alive socket last became idle (performance.now()). */
const idleSince = new WeakMap<Socket, number>()
/** How long each kept-alive socket may stay idle (ms): its server's `Keep-Alive: timeout` less a second, when it said one. */
const idleLimit = new WeakMap<Socket, number>()
/**
 * The idle limit of a socket whose server said none (ms): Node's servers close an idle socket after
 * 5 s by default and do not always say so (an answer that sets its own `Connection` header carries
 * no `Keep-Alive`), so a second less; a server that keeps sockets longer costs a new connection.
 */
const DEFAULT_IDLE_LIMIT_MS = 4_000

/** The idle time a response's `Keep-Alive: timeout=N` allows its socket (ms), less a second for the way; undefined when it says none. */
const keepAliveLimit = (header: string | undefined): number | undefined => {
  const seconds = header === undefined ? undefined : /(?:^|[\s,])timeout=(\d+)/i.exec(header)?.[1]
  return seconds === undefined ? undefined : Math.max(0, Number(seconds) * 1000 - 1000)
}

/**
 * Drops the kept-alive sockets of `agent` idle for longer than their server keeps them: a request
 * written on one could meet the server's close on the way (a reset, with a tool call not sent
 * again). Checked at each request, not by the socket's timer, which a busy event loop runs late.
 */
const dropStaleSockets = (agent: HttpAgent): void => {
  const free = agent.freeSockets as Record<string, Socket[] | undefined>
  const now = performance.now()
  for (const name of Object.keys(free)) {
    const sockets = free[name] ?? []
    const fresh = sockets.filter((s) => now - (idleSince.get(s) ?? now) < (idleLimit.get(s) ?? DEFAULT_IDLE_LIMIT_MS))
    if (fresh.length === sockets.length) continue
    for (const s of sockets) if (!fresh.includes(s)) s.destroy()
    if (fresh.length > 0) free[name] = fresh
    else delete free[name]
  }
}

/** One event of an event stream (text/event-stream). */
export interface StreamEvent {
  readonly event: string
  readonly data: string
  readonly id: string | undefined
}

/**
 * Parses an event stream as its chunks arrive (the WHATWG rules: LF, CRLF or CR line ends; `data`
 * lines joined by LF; comments and unknown fields ignored; an event ends at a blank line).
 *
 * At most `maxEventBytes` (UTF-8) are held for one event: its data (the message) and any unfinished
 * line (a comment or field that never ends counts too). `push` throws `MessageTooLargeError` past it;
 * the parser must not be used after that.
 */
export class EventStreamParser {
  /** The pieces of a line whose end has not come yet. */
  private partial: Array<string> = []
  /** Whether the stream ends lines with CR (or CRLF): only then is CR searched for. */
  private crSeen = false
  /** Whether the last chunk ended with a CR, so that a LF opening the next one is part of it. */
  private skipLf = false
  private data: Array<string> = []
  private event = ""
  /** The last `id:` the server sent (what a resumed stream asks for in Last-Event-ID). */
  lastEventId: string | undefined
  /** The last `retry:` the server sent, in ms. */
  retryMs: number | undefined
  /** UTF-8 bytes of the unfinished line's pieces. */
  private partialBytes = 0
  /** UTF-8 bytes of the event's data so far: its data lines and the LFs joining them (the message). */
  private dataBytes = 0

  constructor(
    private readonly onEvent: (event: StreamEvent) => void,
    private readonly maxEventBytes = Number.POSITIVE_INFINITY
  ) {}

  push(chunk: string): void {
    // Only the new chunk is searched for line ends, and an unfinished line is kept in pieces: a
    // large answer (one long data line over many chunks) is read in linear time.
    let pos = 0
    if (this.skipLf) {
      // The last chunk ended with a CR: a LF starting this one belongs to it.
      if (chunk.length > 0) this.skipLf = false
      if (chunk.startsWith("\n")) pos = 1
    }
    if (!this.crSeen && chunk.includes("\r")) this.crSeen = true
    while (pos < chunk.length) {
      let end = chunk.indexOf("\n", pos)
      let next = end + 1
      if (this.crSeen) {
        const cr = chunk.indexOf("\r", pos)
        if (cr >= 0 && (end < 0 || cr < end)) {
          end = cr
          next = chunk[cr + 1] === "\n" ? cr + 2 : cr + 1
          if (cr === chunk.length - 1) this.skipLf = true
        }
      }
      if (end < 0) {
        const rest = chunk.slice(pos)
        this.partialBytes += Buffer.byteLength(rest)
        // Counted before the line ends, less the longest prefix ("data: ") it may turn out to have.
        this.checkSize(this.partialBytes - 6 + (this.data.length > 0 ? 1 : 0))
        this.partial.push(rest)
        return
      }
      const piece = chunk.slice(pos, end)
      if (this.partial.length > 0) {
        this.partial.push(piece)
        const line = this.partial.join("")
        this.partial = []
        this.partialBytes = 0
        this.line(line)
      } else this.line(piece)
      pos = next
    }
  }

  /** Throws when the event's data and `pending` bytes more are over the limit. */
  private checkSize(pending: number): void {
    if (this.dataBytes + pending > this.maxEventBytes) {
      throw new MessageTooLargeError("an event of the event stream", this.maxEventBytes)
    }
  }

  private line(line: string): void {
    if (line === "") {
      if (this.data.length > 0) this.onEvent({ event: this.event === "" ? "message" : this.event, data: this.data.join("\n"), id: this.lastEventId })
      this.data = []
      this.event = ""
      this.dataBytes = 0
      return
    }
    if (line.startsWith(":")) return
    const colon = line.indexOf(":")
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? "" : line.slice(colon + 1)
    if (value.startsWith(" ")) value = value.slice(1)
    if (field === "data") {
      this.dataBytes += Buffer.byteLength(value) + (this.data.length > 0 ? 1 : 0)
      this.checkSize(0)
      this.data.push(value)
    } else if (field === "event") this.event = value
    else if (field === "id" && !value.includes("\0")) this.lastEventId = value
    else if (field === "retry" && /^\d+$/.test(value)) this.retryMs = Number(value)
  }
}

/**
 * An HTTP error answer to a POST, with the start of its body (at most 200 characters): what the era
 * probe reads when the body is not the request's own JSON-RPC error.
 */
export class HttpAnswerError extends StreamableHttpError {
  constructor(
    status: number,
    message: string,
    readonly body: string,
    /** The JSON-RPC error the body holds, when it is one (read whole, up to 64 KiB). */
    readonly rpcError?: { readonly code: number; readonly message: string; readonly data?: unknown } | undefined
  ) {
    super(status, message)
  }
}

/** How much of an error answer in JSON is read to find its JSON-RPC error. */
const ERROR_JSON_BYTES = 64 * 1024

/** The JSON-RPC error response a body holds (its id, its error, the message itself), if it does. */
const rpcErrorOf = (
  body: string
): { readonly id: string | number | null; readonly error: { code: number; message: string; data?: unknown }; readonly message: JSONRPCMessage } | undefined => {
  try {
    const parsed: unknown = JSON.parse(body)
    if (typeof parsed !== "object" || parsed === null) return undefined
    const { id, error } = parsed as { id?: unknown; error?: unknown }
    if (typeof error !== "object" || error === null) return undefined
    const { code, message, data } = error as { code?: unknown; message?: unknown; data?: unknown }
    if (typeof code !== "number") return undefined
    return {
      id: typeof id === "string" || typeof id === "number" ? id : null,
      error: { code, message: typeof message === "string" ? message : "", ...(data !== undefined ? { data } : {}) },
      message: parsed as JSONRPCMessage
    }
  } catch {
    return undefined
  }
}

/**
 * A header value as the spec's Streamable HTTP binding carries a name: as it is when it is plain
 * visible ASCII (spaces inside allowed), else `=?base64?<UTF-8 in Base64>?=` (so is a value that
 * looks like that sentinel).
 */
export const headerValue = (value: string): string =>
  /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/.test(value) && !(value.startsWith("=?base64?") && value.endsWith("?="))
    ? value
    : `=?base64?${Buffer.from(value, "utf8").toString("base64")}?=`

/**
 * The modern era's headers of a request whose `_meta` names a protocol version (else undefined),
 * with a tools/call's `Mcp-Param-{Name}` headers for the parameters its tool marks `x-mcp-header`.
 */
const modernHeaders = (message: JSONRPCMessage, params$: ReadonlyMap<string, ReadonlyArray<ParamHeader>> | undefined): Record<string, string> | undefined => {
  const { method, params } = message as { method?: unknown; params?: Record<string, unknown> }
  if (typeof method !== "string" || !("id" in message)) return undefined
  const meta = params?.["_meta"] as Record<string, unknown> | undefined
  const version = meta?.[PROTOCOL_VERSION_META_KEY]
  if (typeof version !== "string") return undefined
  const headers: Record<string, string> = { "mcp-protocol-version": version, "mcp-method": method }
  const name =
    method === "resources/read" ? params?.["uri"] : method === "tools/call" || method === "prompts/get" ? params?.["name"] : TASK_METHODS.has(method) ? params?.["taskId"] : undefined
  if (typeof name === "string") headers["mcp-name"] = headerValue(name)
  const marked = method === "tools/call" && typeof name === "string" ? params$?.get(name) : undefined
  if (marked !== undefined) {
    for (const { name: header, path } of marked) {
      const text = paramHeaderText(valueAt(params?.["arguments"], path))
      if (text !== undefined) headers[`mcp-param-${header.toLowerCase()}`] = headerValue(text)
    }
  }
  return headers
}

/**
 * The W3C trace context of a request as HTTP headers too (`traceparent`, `tracestate`, `baggage`),
 * from its `_meta` (set by the call pipeline, from values it checked): an HTTP server that traces
 * its requests continues the store's span without reading the body. Nothing when it has none.
 */
const addTraceHeaders = (message: JSONRPCMessage, headers: Record<string, string>): void => {
  const meta = (message as { params?: { _meta?: Record<string, unknown> } }).params?._meta
  if (meta === undefined) return
  const parent = meta["traceparent"]
  if (typeof parent !== "string") return
  headers["traceparent"] = parent
  const state = meta["tracestate"]
  if (typeof state === "string") headers["tracestate"] = state
  const baggage = meta["baggage"]
  if (typeof baggage === "string") headers["baggage"] = baggage
}

/** What a POST's event stream is waiting for: the requests it carries, until each is answered. */
type Pending = Set<string | number>

/** One POST that carries requests: what it waits for, and its HTTP request (to abort it). */
interface Post {
  readonly pending: Pending
  req: ClientRequest | undefined
  /** Every request it carried was cancelled by the SDK: its failures are nobody's business. */
  abandoned: boolean
}

/** Options of the transport. */
export interface HttpTransportOptions {
  /** The largest message read (a JSON answer, one event); default `DEFAULT_MAX_MESSAGE_BYTES`. */
  readonly maxMessageBytes?: number | undefined
  /** The service's OAuth token source, for a remote service (src/mcp/oauth-client.ts). */
  readonly auth?: UpstreamAuth | undefined
  /** Resolves the host (src/mcp/upstream-policy.ts checks each address it returns). */
  readonly lookup?: LookupFunction | undefined
}

export class HttpClientTransport implements Transport {
  onclose?: (() => void) | undefined
  onerror?: ((error: Error) => void) | undefined
  onmessage?: ((message: JSONRPCMessage, extra?: MessageExtraInfo) => void) | undefined

  private session: string | undefined
  private protocolVersion: string | undefined
  /** The modern era is spoken (see the module comment). */
  private modern = false
  /** The `x-mcp-header` parameters of each tool (modern era), from the last tools/list. */
  private paramHeaders: ReadonlyMap<string, ReadonlyArray<ParamHeader>> | undefined
  private readonly agent: HttpAgent
  private readonly send$: typeof httpRequest
  /** Where every request goes, as node:http options (converting the URL per request costs). */
  private readonly target: ReturnType<typeof urlToHttpOptions>
  private readonly maxMessageBytes: number
  private readonly auth: UpstreamAuth | undefined
  /**
   * The async context the transport was created in (the service's connection work): every request
   * starts in it, so the socket and body callbacks of a tool call run in it too, not in the context
   * of the HTTP request that asked for the call (src/runtime/process-guard.ts names the service from it).
   */
  private readonly scope = new AsyncResource("McpHttpClientTransport")
  /** Every request still open, so that close() can end them all. */
  private readonly open = new Set<ClientRequest>()
  /** The POST carrying each request not answered yet, by request id. */
  private readonly posts = new Map<string | number, Post>()
  private started = false
  private closed = false
  private reconnectTimer: NodeJS.Timeout | undefined
  private retryMs: number | undefined
  /** Why the transport closed itself, when the standing stream's end showed the server gone. */
  private lostBecause: string | undefined

  constructor(
    private readonly url: URL,
    private readonly headers: Readonly<Record<string, string>> = {},
    options: HttpTransportOptions = {}
  ) {
    const https = url.protocol === "https:"
    this.agent = sharedAgents.acquire(url)
    this.send$ = https ? httpsRequest : httpRequest
    this.target = options.lookup === undefined ? urlToHttpOptions(url) : { ...urlToHttpOptions(url), lookup: options.lookup }
    this.maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES
    this.auth = options.auth
  }

  get sessionId(): string | undefined {
    return this.session
  }

  /**
   * Why the transport closed by itself because its standing GET stream ended and could not be
   * resumed (the server is gone or forgot the session); undefined for any other close.
   */
  get streamLostReason(): string | undefined {
    return this.lostBecause
  }

  /** The tools' `x-mcp-header` parameters (src/mcp/param-headers.ts), mirrored into their calls' headers. */
  setParamHeaders(headers: ReadonlyMap<string, ReadonlyArray<ParamHeader>>): void {
    this.paramHeaders = headers
  }

  setProtocolVersion(version: string): void {
    this.protocolVersion = version
    this.modern = isModernVersion(version)
  }

  async start(): Promise<void> {
    if (this.started) throw new Error("HttpClientTransport already started")
    this.started = true
  }

  async send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    if (options?.resumptionToken !== undefined) {
      this.openStream(options.resumptionToken, 0)
      return
    }
    // The SDK gave up on a request (time-out, abort): stop its HTTP request and the reading of its
    // body; the notification still goes to the server below.
    if ("method" in message && message.method === "notifications/cancelled") {
      this.abandon(message.params?.requestId)
      // The modern era: closing the request's stream is the cancellation.
      if (this.modern) return
    }
    // Before an era is known (the probe) and in the modern era: headers from the body.
    const modern = this.modern || this.protocolVersion === undefined ? modernHeaders(message, this.paramHeaders) : undefined
    const post: Post = { pending: new Set(), req: undefined, abandoned: false }
    // A POST with a request that must not run twice (`REPEATABLE`) is sent once; notifications and answers may go again.
    let once = false
    for (const m of Array.isArray(message) ? (message as Array<JSONRPCMessage>) : [message]) {
      if ("method" in m && "id" in m && m.id !== undefined) {
        post.pending.add(m.id)
        this.posts.set(m.id, post)
        once ||= !REPEATABLE.has(m.method)
      }
    }
    let streaming = false
    try {
      const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json, text/event-stream" }
      addTraceHeaders(message, headers)
      const response = await this.request("POST", JSON.stringify(message), modern === undefined ? headers : { ...headers, ...modern }, (req) => (post.req = req), once)
      const session = response.headers["mcp-session-id"]
      if (typeof session === "string" && session !== "" && modern === undefined && !this.modern) this.session = session
      if (response.statusCode === 202) {
        this.drain(response)
        // The session is initialized: open the stream of server-initiated messages.
        if ("method" in message && message.method === "notifications/initialized") this.openStream(undefined, 0)
        return
      }
      const status = response.statusCode ?? 0
      if (status < 200 || status >= 300) {
        const line = `Error POSTing to endpoint: HTTP ${status}${response.statusMessage ? ` ${response.statusMessage.slice(0, 100)}` : ""}`
        if (status >= 400 && status < 500 && mediaType(response.headers) === "application/json") {
          // A JSON-RPC error: a modern server's answer to a request it refuses (-32022, -32601, ...),
          // or a modern-only server's refusal of a 2025 initialize (-32022 with what it speaks).
          const body = await readBody(response, Math.min(this.maxMessageBytes, ERROR_JSON_BYTES))
          const error = rpcErrorOf(body)
          if (modern !== undefined && error !== undefined && typeof error.id !== "object" && post.pending.delete(error.id)) return this.deliver(error.message)
          throw new HttpAnswerError(status, `${line}: ${body.slice(0, ERROR_BODY_CHARS)}`, body.slice(0, ERROR_BODY_CHARS), error?.error)
        }
        const text = await failureText(response)
        throw new HttpAnswerError(status, `${line}: ${text}`, text)
      }
      if (post.pending.size === 0) {
        this.drain(response)
        return
      }
      const type = mediaType(response.headers)
      if (type === "text/event-stream") {
        streaming = true
        this.readStream(response, post)
      } else if (type === "application/json") {
        const data: unknown = JSON.parse(await readBody(response, this.maxMessageBytes))
        for (const m of Array.isArray(data) ? data : [data]) this.deliver(this.asMessage(m))
      } else {
        this.drain(response)
        throw new StreamableHttpError(-1, `Unexpected content type: ${response.headers["content-type"] ?? "(none)"}`)
      }
    } catch (error) {
      // Destroyed because the SDK cancelled it: the SDK has already answered its caller.
      if (post.abandoned) return
      if (error instanceof MessageTooLargeError) {
        this.fail(error)
        throw error
      }
      this.onerror?.(error as Error)
      throw error
    } finally {
      if (!streaming) this.forget(post)
    }
  }

  /** Ends the session on the server (DELETE); a server that does not allow it (405) is fine. */
  async terminateSession(): Promise<void> {
    if (this.session === undefined) return
    const response = await this.request("DELETE", undefined, {})
    this.drain(response)
    const status = response.statusCode ?? 0
    if ((status < 200 || status >= 300) && status !== 405) {
      throw new StreamableHttpError(status, `Failed to terminate session: ${response.statusMessage ?? status}`)
    }
    this.session = undefined
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    clearTimeout(this.reconnectTimer)
    for (const request of this.open) request.destroy()
    this.open.clear()
    this.posts.clear()
    sharedAgents.release(this.url)
    this.onclose?.()
  }

  /**
   * Sends one HTTP request; resolves with the response once its head has arrived. `onRequest` is
   * given the request (again when it is retried on a new socket), so that it can be destroyed.
   * `once`: it must not run twice (`REPEATABLE`), so it is sent again only when none of it was sent.
   */
  private request(
    method: "GET" | "POST" | "DELETE",
    body: string | undefined,
    extra: Record<string, string>,
    onRequest?: (req: ClientRequest) => void,
    once = false
  ): Promise<IncomingMessage> {
    if (this.closed) return Promise.reject(new Error("the connection is closed"))
    const auth = this.auth
    if (auth === undefined) return this.exchange(method, body, extra, onRequest, undefined, once)
    return this.withToken(auth, method, body, extra, onRequest, once)
  }

  /**
   * A request with the service's bearer token. A 401 with a bearer challenge gets a new token and
   * one more try; a second one means the new token is refused too: only a user can help.
   */
  private async withToken(
    auth: UpstreamAuth,
    method: "GET" | "POST" | "DELETE",
    body: string | undefined,
    extra: Record<string, string>,
    onRequest: ((req: ClientRequest) => void) | undefined,
    once: boolean
  ): Promise<IncomingMessage> {
    for (const last of [false, true]) {
      const token = await auth.accessToken()
      const response = await this.exchange(method, body, extra, onRequest, token, once)
      const challenge = response.statusCode === 401 ? parseBearerChallenge(response.headers["www-authenticate"]) : undefined
      if (challenge === undefined) return response
      this.drain(response)
      await auth.unauthorized(challenge, token, last)
    }
    throw new Error("unreachable: the last unauthorized() rejects")
  }

  /** Sends one HTTP request (with `token` as its bearer, when given); see `request`. */
  private exchange(
    method: "GET" | "POST" | "DELETE",
    body: string | undefined,
    extra: Record<string, string>,
    onRequest: ((req: ClientRequest) => void) | undefined,
    token: string | undefined,
    once: boolean
  ): Promise<IncomingMessage> {
    if (this.closed) return Promise.reject(new Error("the connection is closed"))
    const headers: Record<string, string> = { ...this.headers, ...extra }
    if (token !== undefined) headers["authorization"] = `Bearer ${token}`
    if (this.session !== undefined) headers["mcp-session-id"] = this.session
    if (this.protocolVersion !== undefined && headers["mcp-protocol-version"] === undefined) headers["mcp-protocol-version"] = this.protocolVersion
    if (body !== undefined) headers["content-length"] = String(Buffer.byteLength(body))
    const attempt = (retry: boolean): Promise<IncomingMessage> =>
      new Promise((resolve, reject) => {
        dropStaleSockets(this.agent)
        const req = this.scope.runInAsyncScope(() => this.send$({ ...this.target, method, headers, agent: this.agent }))
        this.open.add(req)
        onRequest?.(req)
        req.once("close", () => this.open.delete(req))
        req.once("response", (res) => {
          const limit = keepAliveLimit(String(res.headers["keep-alive"] ?? "") || undefined)
          if (limit !== undefined) idleLimit.set(res.socket, limit)
          const status = res.statusCode ?? 0
          if (status >= 300 && status < 400) {
            this.drain(res)
            const location = res.headers.location
            reject(new StreamableHttpError(status, `the server redirects${location !== undefined ? ` to ${location.slice(0, 200)}` : ""}; redirects are not followed`))
            return
          }
          resolve(res)
        })
        // Whether the request was handed to its socket: before that, nothing of it was sent.
        let written = false
        const write = () => {
          written = true
          req.end(body)
        }
        req.once("error", (error: NodeJS.ErrnoException) => {
          // A kept-alive socket reset: most likely the server closed it meanwhile (its keep-alive
          // time-out met by a process whose timers ran late, or a restart), and the other idle
          // sockets to the server went with it: they are dropped. A large request met by the close
          // half-way through its writing fails with EPIPE instead. The request is sent once more,
          // on a new connection, when nothing of it was sent, or when running it twice does no
          // harm; a tool call written to the socket is not, since the server may have read it
          // before the reset (HTTP does not send such a request again by itself).
          const reset = req.reusedSocket && (error.code === "ECONNRESET" || error.code === "EPIPE") && !this.closed
          if (reset) this.dropIdleSockets()
          if (reset && retry && (!once || !written)) resolve(attempt(false))
          else if (reset && once && written) reject(new Error(`the connection was reset after the request was sent on a kept-alive connection: the server may have run it, so it is not sent again (${error.message})`, { cause: error }))
          else reject(error)
        })
        if (!once) write()
        else {
          // On a kept-alive socket, one turn of the event loop first: a close the server sent while
          // the socket was idle is read before anything is written, and the request goes elsewhere.
          req.once("socket", () => (req.reusedSocket ? setImmediate(() => req.destroyed || write()) : write()))
        }
      })
    return attempt(true)
  }

  /** Ends the idle kept-alive sockets to this server (shared by its connections: they open new ones). */
  private dropIdleSockets(): void {
    // The agent is this server's alone (one per origin, `SharedAgents`): every idle socket it keeps is one to it.
    const free = this.agent.freeSockets as Record<string, Socket[] | undefined>
    for (const name of Object.keys(free)) {
      const idle = free[name] ?? []
      delete free[name]
      for (const socket of idle) socket.destroy()
    }
  }

  /** A message over the limit: reading has stopped; report it and close (the service reconnects). */
  private fail(error: MessageTooLargeError): void {
    if (this.closed) return
    this.onerror?.(error)
    void this.close()
  }

  /** Drops a cancelled request; its POST is destroyed once nothing else waits on it. */
  private abandon(id: unknown): void {
    if (typeof id !== "string" && typeof id !== "number") return
    const post = this.posts.get(id)
    if (post === undefined) return
    this.posts.delete(id)
    post.pending.delete(id)
    if (post.pending.size > 0) return
    post.abandoned = true
    // With an error of its own: a destroy without one reads as a reset socket, which is sent again.
    post.req?.destroy(new Error("the request was cancelled"))
  }

  /** The requests of a POST that is done with are no longer cancellable through it. */
  private forget(post: Post): void {
    for (const id of post.pending) if (this.posts.get(id) === post) this.posts.delete(id)
  }

  /** Reads a POST's event stream; a request it leaves unanswered fails as "connection closed". */
  private readStream(response: IncomingMessage, post: Post): void {
    const requests = post.pending
    const parser = new EventStreamParser((event) => {
      if (event.event !== "message") return
      const message = this.parse(event.data)
      if (message === undefined) return
      if (("result" in message || "error" in message) && "id" in message) {
        requests.delete(message.id as string | number)
        this.posts.delete(message.id as string | number)
      }
      // A request of the server read here belongs to the requests this POST carries (src/mcp/session.ts).
      this.deliver(message, "method" in message && "id" in message ? { carriedBy: requests } : undefined)
    }, this.maxMessageBytes)
    this.consume(response, parser, (error) => {
      this.forget(post)
      if (error instanceof MessageTooLargeError) return this.fail(error)
      if (this.closed || requests.size === 0) return
      if (parser.lastEventId !== undefined) {
        // The server made the stream resumable: pick up the answers on a GET stream.
        this.openStream(parser.lastEventId, 0)
        return
      }
      if (error !== undefined) this.onerror?.(error)
      for (const id of requests) {
        this.deliver({ jsonrpc: "2.0", id, error: { code: -32000, message: "Connection closed" } }, { lost: true })
      }
    })
  }

  /**
   * Opens (or resumes) the standalone GET event stream; reopens it when it ends.
   *
   * A server may decline the stream (405) or close it whenever it likes, so neither is a failure;
   * but once a stream was open, its end is checked at once: it is resumed (Last-Event-ID) without
   * delay (unless it ended as soon as it opened, or the server asked for a delay), and a resumption that
   * cannot reach the server (refused, reset) or that it refuses (404 unknown session, 5xx from a
   * proxy whose upstream is gone, ...) means the server is gone: the transport closes itself
   * (`streamLostReason`), and the service reconnects without waiting for a failed ping. A 405 on a
   * resumption is a server that stopped offering the stream: nothing more is done.
   */
  private openStream(lastEventId: string | undefined, attempt: number, resuming = false): void {
    if (this.closed) return
    const extra: Record<string, string> = { accept: "text/event-stream" }
    if (lastEventId !== undefined) extra["last-event-id"] = lastEventId
    this.request("GET", undefined, extra).then(
      (response) => {
        const status = response.statusCode ?? 0
        if (status === 405) {
          // The server offers no stream: nothing more to do.
          this.drain(response)
          return
        }
        if (status < 200 || status >= 300) {
          this.drain(response)
          // The server is there and holds a stream of the session still: try again later.
          if (resuming && status === 409) return this.reopen(lastEventId, attempt + 1)
          if (resuming) return this.streamLost(`the event stream ended and its resumption was answered HTTP ${status}`)
          this.onerror?.(new StreamableHttpError(status, `Failed to open SSE stream: ${response.statusMessage ?? status}`))
          return
        }
        const parser = new EventStreamParser((event) => {
          if (event.event !== "message") return
          this.deliver(this.parse(event.data))
        }, this.maxMessageBytes)
        const openedAt = performance.now()
        this.consume(response, parser, (error) => {
          if (error instanceof MessageTooLargeError) return this.fail(error)
          this.retryMs = parser.retryMs ?? this.retryMs
          // Broken off (the server died, a proxy cut it), or ended after a while (a server shutting
          // down ends its streams): find out at once whether the server is there. A stream that ends
          // (or breaks) as soon as it opens is reopened no faster than the retry delay, whatever
          // `retry:` asked (a server asking 0 would have the store reopen it in a loop), and a
          // delay the server asked for is kept, up to the longest back-off.
          const tooSoon = performance.now() - openedAt < RECONNECT.initialMs
          this.resume(parser.lastEventId ?? lastEventId, Math.max(this.askedRetryMs() ?? 0, tooSoon ? RECONNECT.initialMs : 0))
        })
      },
      (error: unknown) => {
        if (resuming) return this.streamLost(`the event stream ended and could not be resumed: ${describeError(error)}`)
        this.onerror?.(error instanceof Error ? error : new Error(String(error)))
        this.reopen(lastEventId, attempt + 1)
      }
    )
  }

  /** Opens the stream again after the back-off of `attempt` (the first GET, or after a 409). */
  private reopen(lastEventId: string | undefined, attempt: number): void {
    if (this.closed) return
    if (attempt > RECONNECT.maxRetries) {
      this.onerror?.(new Error(`the event stream could not be reopened after ${RECONNECT.maxRetries} retries`))
      return
    }
    this.resume(lastEventId, this.askedRetryMs() ?? Math.min(RECONNECT.initialMs * RECONNECT.growth ** attempt, RECONNECT.maxMs), attempt, false)
  }

  /** The delay the server asked for (`retry:`), at most the longest back-off (a larger one would overflow a timer, which fires at once). */
  private askedRetryMs(): number | undefined {
    return this.retryMs === undefined ? undefined : Math.min(this.retryMs, RECONNECT.maxMs)
  }

  /** Reopens the standing stream after `delayMs` (0: on the next turn), as a resumption by default. */
  private resume(lastEventId: string | undefined, delayMs: number, attempt = 0, resuming = true): void {
    if (this.closed) return
    clearTimeout(this.reconnectTimer)
    this.reconnectTimer = setTimeout(() => this.openStream(lastEventId, attempt, resuming), delayMs)
  }

  /** The standing stream showed the server gone: close, so that the owner reconnects now. */
  private streamLost(reason: string): void {
    if (this.closed) return
    this.lostBecause = reason
    this.onerror?.(new Error(reason))
    void this.close()
  }

  /**
   * Feeds a response body to a parser; `done` runs once, when the body ends or breaks. An event
   * over the limit destroys the response at once: nothing more is read.
   */
  private consume(response: IncomingMessage, parser: EventStreamParser, done: (error?: Error) => void): void {
    let finished = false
    const finish = (error?: Error) => {
      if (finished) return
      finished = true
      done(error)
    }
    response.setEncoding("utf8")
    response.on("data", (chunk: string) => {
      if (finished) return
      try {
        parser.push(chunk)
      } catch (error) {
        response.destroy()
        finish(error instanceof Error ? error : new Error(String(error)))
      }
    })
    response.once("end", () => finish())
    response.once("error", (error) => finish(error))
    response.once("close", () => finish(response.complete ? undefined : new Error("the event stream broke off")))
  }

  /**
   * Lets a body we do not need go by without keeping it; one longer than a message may be (an
   * answer that should be empty) ends the response instead of being read for ever.
   */
  private drain(response: IncomingMessage): void {
    let bytes = 0
    response.on("data", (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > this.maxMessageBytes) response.destroy()
    })
    response.on("error", () => {})
    response.resume()
  }

  /** An event's data as a message; anything else is reported to onerror and dropped. */
  private parse(data: string): JSONRPCMessage | undefined {
    try {
      return this.asMessage(JSON.parse(data))
    } catch (error) {
      this.onerror?.(error as Error)
      return undefined
    }
  }

  /** The SDK's Client validates each message it is given: only the shape is checked here. */
  private asMessage(value: unknown): JSONRPCMessage | undefined {
    if (typeof value === "object" && value !== null && !Array.isArray(value)) return value as JSONRPCMessage
    this.onerror?.(new Error(`not a JSON-RPC message: ${excerptOf(value, 200)}`))
    return undefined
  }

  private deliver(message: JSONRPCMessage | undefined, extra?: CarriedBy | AnswerLost): void {
    if (message !== undefined) this.onmessage?.(message, extra as MessageExtraInfo | undefined)
  }
}

const mediaType = (headers: IncomingHttpHeaders): string => (headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase()

/**
 * A body as text, at most `maxBytes` of it: a longer one (by its Content-Length, or as it arrives)
 * destroys the response at once and rejects with `MessageTooLargeError`.
 */
const readBody = (response: IncomingMessage, maxBytes: number): Promise<string> =>
  new Promise((resolve, reject) => {
    const tooLarge = () => {
      response.destroy()
      reject(new MessageTooLargeError("the HTTP answer", maxBytes))
    }
    const declared = Number(response.headers["content-length"])
    if (Number.isFinite(declared) && declared > maxBytes) return tooLarge()
    const chunks: Array<Buffer> = []
    let bytes = 0
    response.on("data", (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > maxBytes) return tooLarge()
      chunks.push(chunk)
    })
    response.once("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    response.once("error", reject)
    response.once("close", () => {
      if (!response.complete) reject(new Error("the answer broke off"))
    })
  })

/**
 * The start of an error answer's body (at most `ERROR_BODY_CHARS` characters), or its status text.
 * Only that much is read: the response is destroyed once it has arrived.
 */
const failureText = (response: IncomingMessage): Promise<string> =>
  new Promise((resolve) => {
    let text = ""
    const done = () => {
      const kept = text.slice(0, ERROR_BODY_CHARS)
      resolve(kept !== "" ? kept : (response.statusMessage ?? String(response.statusCode)))
    }
    response.setEncoding("utf8")
    response.on("data", (chunk: string) => {
      text += chunk
      if (text.length >= ERROR_BODY_CHARS) {
        response.destroy()
        done()
      }
    })
    response.once("end", done)
    response.once("error", done)
    response.once("close", done)
  })
