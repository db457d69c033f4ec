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
 * signal. The SDK's `Client` runs on top of this unchanged (it validates every message it is given),
 * and failures keep the SDK's shapes (`StreamableHTTPError` with the HTTP status, Node's socket
 * errors), so `mcpRequest` classifies them as before.
 *
 * Not supported (the store never uses them): OAuth auth providers and following redirects (a 3xx
 * answer fails the request and names the new location).
 */
import { Agent as HttpAgent, request as httpRequest, type ClientRequest, type IncomingHttpHeaders, type IncomingMessage } from "node:http"
import { Agent as HttpsAgent, request as httpsRequest } from "node:https"
import { StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import type { Transport, TransportSendOptions } from "@modelcontextprotocol/sdk/shared/transport.js"
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js"

/** Reconnection of the GET event stream, as the SDK's defaults: 1 s, x1.5, at most 30 s, 2 retries. */
const RECONNECT = { initialMs: 1_000, growth: 1.5, maxMs: 30_000, maxRetries: 2 } as const

/** How much of an error answer's body is kept for its message. */
const ERROR_BODY_CHARS = 2_000

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
      entry = { agent: url.protocol === "https:" ? new HttpsAgent(options) : new HttpAgent(options), users: 0 }
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
}

export const sharedAgents = new SharedAgents()

/** One event of an event stream (text/event-stream). */
export interface StreamEvent {
  readonly event: string
  readonly data: string
  readonly id: string | undefined
}

/**
 * Parses an event stream as its chunks arrive (the WHATWG rules: LF, CRLF or CR line ends; `data`
 * lines joined by LF; comments and unknown fields ignored; an event ends at a blank line).
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

  constructor(private readonly onEvent: (event: StreamEvent) => void) {}

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
        this.partial.push(chunk.slice(pos))
        return
      }
      const piece = chunk.slice(pos, end)
      if (this.partial.length > 0) {
        this.partial.push(piece)
        this.line(this.partial.join(""))
        this.partial = []
      } else this.line(piece)
      pos = next
    }
  }

  private line(line: string): void {
    if (line === "") {
      if (this.data.length > 0) this.onEvent({ event: this.event === "" ? "message" : this.event, data: this.data.join("\n"), id: this.lastEventId })
      this.data = []
      this.event = ""
      return
    }
    if (line.startsWith(":")) return
    const colon = line.indexOf(":")
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? "" : line.slice(colon + 1)
    if (value.startsWith(" ")) value = value.slice(1)
    if (field === "data") this.data.push(value)
    else if (field === "event") this.event = value
    else if (field === "id" && !value.includes("\0")) this.lastEventId = value
    else if (field === "retry" && /^\d+$/.test(value)) this.retryMs = Number(value)
  }
}

/** What a POST's event stream is waiting for: the requests it carries, until each is answered. */
type Pending = Set<string | number>

export class HttpClientTransport implements Transport {
  onclose?: (() => void) | undefined
  onerror?: ((error: Error) => void) | undefined
  onmessage?: ((message: JSONRPCMessage) => void) | undefined

  private session: string | undefined
  private protocolVersion: string | undefined
  private readonly agent: HttpAgent
  private readonly send$: typeof httpRequest
  /** Every request still open, so that close() can end them all. */
  private readonly open = new Set<ClientRequest>()
  private started = false
  private closed = false
  private reconnectTimer: NodeJS.Timeout | undefined
  private retryMs: number | undefined

  constructor(
    private readonly url: URL,
    private readonly headers: Readonly<Record<string, string>> = {}
  ) {
    const https = url.protocol === "https:"
    this.agent = sharedAgents.acquire(url)
    this.send$ = https ? httpsRequest : httpRequest
  }

  get sessionId(): string | undefined {
    return this.session
  }

  setProtocolVersion(version: string): void {
    this.protocolVersion = version
  }

  async start(): Promise<void> {
    if (this.started) throw new Error("HttpClientTransport already started")
    this.started = true
  }

  async send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    try {
      if (options?.resumptionToken !== undefined) {
        this.openStream(options.resumptionToken, 0)
        return
      }
      const response = await this.request("POST", JSON.stringify(message), {
        "content-type": "application/json",
        accept: "application/json, text/event-stream"
      })
      const session = response.headers["mcp-session-id"]
      if (typeof session === "string" && session !== "") this.session = session
      if (response.statusCode === 202) {
        response.resume()
        // The session is initialized: open the stream of server-initiated messages.
        if ("method" in message && message.method === "notifications/initialized") this.openStream(undefined, 0)
        return
      }
      const status = response.statusCode ?? 0
      if (status < 200 || status >= 300) {
        throw new StreamableHTTPError(status, `Error POSTing to endpoint: ${await failureText(response)}`)
      }
      const requests: Pending = new Set()
      for (const m of Array.isArray(message) ? (message as Array<JSONRPCMessage>) : [message]) {
        if ("method" in m && "id" in m && m.id !== undefined) requests.add(m.id)
      }
      if (requests.size === 0) {
        response.resume()
        return
      }
      const type = mediaType(response.headers)
      if (type === "text/event-stream") {
        this.readStream(response, requests)
      } else if (type === "application/json") {
        const data: unknown = JSON.parse(await readText(response))
        for (const m of Array.isArray(data) ? data : [data]) this.deliver(this.asMessage(m))
      } else {
        response.resume()
        throw new StreamableHTTPError(-1, `Unexpected content type: ${response.headers["content-type"] ?? "(none)"}`)
      }
    } catch (error) {
      this.onerror?.(error as Error)
      throw error
    }
  }

  /** Ends the session on the server (DELETE); a server that does not allow it (405) is fine. */
  async terminateSession(): Promise<void> {
    if (this.session === undefined) return
    const response = await this.request("DELETE", undefined, {})
    response.resume()
    const status = response.statusCode ?? 0
    if ((status < 200 || status >= 300) && status !== 405) {
      throw new StreamableHTTPError(status, `Failed to terminate session: ${response.statusMessage ?? status}`)
    }
    this.session = undefined
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    clearTimeout(this.reconnectTimer)
    for (const request of this.open) request.destroy()
    this.open.clear()
    sharedAgents.release(this.url)
    this.onclose?.()
  }

  /** Sends one HTTP request; resolves with the response once its head has arrived. */
  private request(method: "GET" | "POST" | "DELETE", body: string | undefined, extra: Record<string, string>): Promise<IncomingMessage> {
    if (this.closed) return Promise.reject(new Error("the connection is closed"))
    const headers: Record<string, string> = { ...this.headers, ...extra }
    if (this.session !== undefined) headers["mcp-session-id"] = this.session
    if (this.protocolVersion !== undefined) headers["mcp-protocol-version"] = this.protocolVersion
    if (body !== undefined) headers["content-length"] = String(Buffer.byteLength(body))
    const attempt = (retry: boolean): Promise<IncomingMessage> =>
      new Promise((resolve, reject) => {
        const req = this.send$(this.url, { method, headers, agent: this.agent })
        this.open.add(req)
        req.once("close", () => this.open.delete(req))
        req.once("response", (res) => {
          const status = res.statusCode ?? 0
          if (status >= 300 && status < 400) {
            res.resume()
            const location = res.headers.location
            reject(new StreamableHTTPError(status, `the server redirects${location !== undefined ? ` to ${location}` : ""}; redirects are not followed`))
            return
          }
          resolve(res)
        })
        req.once("error", (error: NodeJS.ErrnoException) => {
          // A kept-alive socket the server closed meanwhile: the request never reached it.
          if (retry && req.reusedSocket && error.code === "ECONNRESET" && !this.closed) resolve(attempt(false))
          else reject(error)
        })
        req.end(body)
      })
    return attempt(true)
  }

  /** Reads a POST's event stream; a request it leaves unanswered fails as "connection closed". */
  private readStream(response: IncomingMessage, requests: Pending): void {
    const parser = new EventStreamParser((event) => {
      if (event.event !== "message") return
      const message = this.parse(event.data)
      if (message === undefined) return
      if (("result" in message || "error" in message) && "id" in message) requests.delete(message.id as string | number)
      this.deliver(message)
    })
    this.consume(response, parser, (error) => {
      if (this.closed || requests.size === 0) return
      if (parser.lastEventId !== undefined) {
        // The server made the stream resumable: pick up the answers on a GET stream.
        this.openStream(parser.lastEventId, 0)
        return
      }
      if (error !== undefined) this.onerror?.(error)
      for (const id of requests) {
        this.onmessage?.({ jsonrpc: "2.0", id, error: { code: -32000, message: "Connection closed" } })
      }
    })
  }

  /** Opens (or resumes) the standalone GET event stream; reopens it with back-off when it ends. */
  private openStream(lastEventId: string | undefined, attempt: number): void {
    if (this.closed) return
    const extra: Record<string, string> = { accept: "text/event-stream" }
    if (lastEventId !== undefined) extra["last-event-id"] = lastEventId
    this.request("GET", undefined, extra).then(
      (response) => {
        const status = response.statusCode ?? 0
        if (status === 405) {
          // The server offers no stream: nothing more to do.
          response.resume()
          return
        }
        if (status < 200 || status >= 300) {
          response.resume()
          this.onerror?.(new StreamableHTTPError(status, `Failed to open SSE stream: ${response.statusMessage ?? status}`))
          return
        }
        const parser = new EventStreamParser((event) => {
          if (event.event !== "message") return
          this.deliver(this.parse(event.data))
        })
        this.consume(response, parser, () => {
          this.retryMs = parser.retryMs ?? this.retryMs
          this.reopen(parser.lastEventId ?? lastEventId, 0)
        })
      },
      (error: unknown) => {
        this.onerror?.(error instanceof Error ? error : new Error(String(error)))
        this.reopen(lastEventId, attempt + 1)
      }
    )
  }

  private reopen(lastEventId: string | undefined, attempt: number): void {
    if (this.closed) return
    if (attempt > RECONNECT.maxRetries) {
      this.onerror?.(new Error(`the event stream could not be reopened after ${RECONNECT.maxRetries} retries`))
      return
    }
    const delay = this.retryMs ?? Math.min(RECONNECT.initialMs * RECONNECT.growth ** attempt, RECONNECT.maxMs)
    clearTimeout(this.reconnectTimer)
    this.reconnectTimer = setTimeout(() => this.openStream(lastEventId, attempt), delay)
  }

  /** Feeds a response body to a parser; `done` runs once, when the body ends or breaks. */
  private consume(response: IncomingMessage, parser: EventStreamParser, done: (error?: Error) => void): void {
    let finished = false
    const finish = (error?: Error) => {
      if (finished) return
      finished = true
      done(error)
    }
    response.setEncoding("utf8")
    response.on("data", (chunk: string) => parser.push(chunk))
    response.once("end", () => finish())
    response.once("error", (error) => finish(error))
    response.once("close", () => finish(response.complete ? undefined : new Error("the event stream broke off")))
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
    this.onerror?.(new Error(`not a JSON-RPC message: ${JSON.stringify(value)?.slice(0, 200)}`))
    return undefined
  }

  private deliver(message: JSONRPCMessage | undefined): void {
    if (message !== undefined) this.onmessage?.(message)
  }
}

const mediaType = (headers: IncomingHttpHeaders): string => (headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase()

const readText = (response: IncomingMessage): Promise<string> =>
  new Promise((resolve, reject) => {
    let text = ""
    response.setEncoding("utf8")
    response.on("data", (chunk: string) => (text += chunk))
    response.once("end", () => resolve(text))
    response.once("error", reject)
    response.once("close", () => {
      if (!response.complete) reject(new Error("the answer broke off"))
    })
  })

/** An error answer's body, cut short, or its status text. */
const failureText = async (response: IncomingMessage): Promise<string> => {
  const text = await readText(response).catch(() => "")
  return text !== "" ? text.slice(0, ERROR_BODY_CHARS) : (response.statusMessage ?? String(response.statusCode))
}
