/**
 * The store as one MCP server: `/mcp` exposes the store scope's tools and `/for_agent/{id}/mcp`
 * an agent's, over Streamable HTTP, so any MCP client (an IDE, an agent framework, the MCP
 * Inspector) can use them. Tools keep their callable names (`<service>__<tool>`); only services
 * that are healthy or warning are listed; `notifications/tools/list_changed` goes out when that set
 * changes; calls go through the same operation as HTTP calls, so they are recorded the same way.
 *
 * Sessions are capped (`maxSessions`): at the cap the oldest idle session is closed to make room,
 * and when every session is busy the new one is refused with 429 and Retry-After. A session with no
 * request for `idleSeconds` is closed. One timer (unref'd) serves every session's expiry.
 *
 * The legacy SSE transport (`GET /sse` + `POST /messages`, src/http/sse-endpoint.ts) is a second
 * kind of session in the same map: the same SDK server and handlers (`buildServer`), cap, expiry,
 * list_changed fan-out and shutdown.
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import { randomUUID } from "node:crypto"
import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { SSEServerTransport } from "@modelcontextprotocol/sdk/server/sse.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv"
import { CallToolRequestSchema, isInitializeRequest, JSONRPCMessageSchema, ListToolsRequestSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js"
import { scopeLabel, type Scope } from "../domain/service.js"
import { statusOf } from "../machines/service.js"
import type { Monitor, MonitorEvent } from "../monitoring/monitor.js"
import { isStoreError } from "../runtime/errors.js"
import type { Store } from "../runtime/store.js"
import { toolViewsFor } from "../runtime/views.js"
import type { ToolGate } from "../domain/tool-filter.js"
import { VERSION } from "../version.js"
import { acceptsEventStream, messagesPath, sessionIdOf, watchRequests } from "./sse-endpoint.js"

/** A session of either transport; `kind` tells which. */
type Session = StreamableSession | SseSession
type StreamableSession = SessionState & { readonly kind: "streamable"; readonly transport: StreamableHTTPServerTransport }
/**
 * A legacy SSE session: it lives as long as its GET stream, which the cap never cuts (it is busy
 * for `makeRoom`); its requests arrive by POST and are answered on the stream, so `busy` counts
 * those in flight, and a session with none for `idleSeconds` is closed, its stream ended.
 */
type SseSession = SessionState & { readonly kind: "sse"; readonly transport: SSEServerTransport }

/** What every session has beside its transport; what `buildServer`'s handlers may keep per session. */
interface SessionState {
  readonly id: string
  readonly server: Server
  readonly scope: Scope
  /**
   * The tool allow-list of the key that opened the session (an agent key's `tools`): the session
   * lists and calls only what it lets through, whoever sends its later requests.
   */
  readonly gate: ToolGate | undefined
  /** Names of the tools last announced, to tell whether the set changed. */
  listed: string
  /** Requests in flight, an open GET stream included; idle at 0. */
  busy: number
  /** performance.now() when a request of the session last began or ended. */
  touchedAt: number
}

/** The caps of the MCP endpoint (`ServerOptions.maxMcpSessions`, `mcpSessionIdleSeconds`). */
export interface McpGatewayOptions {
  /** Open sessions, every scope together. */
  readonly maxSessions: number
  /** A session with no request (and no open GET stream) for this long is closed. */
  readonly idleSeconds: number
}

/** Seconds a client refused at the session cap is asked to wait (Retry-After). */
export const MCP_RETRY_AFTER_SECONDS = 5

// Node timers fire at once for delays above 2^31-1 ms.
const MAX_TIMER_MS = 2_147_483_647

/** Whether a POST body (one message or a batch) holds an `initialize` request. */
const initializes = (body: unknown): boolean => (Array.isArray(body) ? body.some((m) => isInitializeRequest(m)) : isInitializeRequest(body))

const jsonRpcError = (res: ServerResponse, status: number, code: number, message: string, headers: Record<string, string> = {}, data?: unknown) =>
  void res
    .writeHead(status, { "content-type": "application/json", ...headers })
    .end(JSON.stringify({ jsonrpc: "2.0", error: { code, message, ...(data !== undefined ? { data } : {}) }, id: null }))

/**
 * The MCP endpoint's sessions, for every scope. Owned by the HTTP server; `close()` ends them.
 * The session map is kept in order of last activity (a session is moved to the end when a request
 * begins or ends), so the oldest idle session is the first idle one in it.
 */
export class McpGateway {
  private readonly sessions = new Map<string, Session>()
  private readonly unsubscribe: () => void
  private readonly idleMs: number
  private sweepTimer: NodeJS.Timeout | undefined
  private sweepAt = Number.POSITIVE_INFINITY
  private shuttingDown = false
  // Each SDK Server builds its own Ajv instance unless given one (a third of an initialize's CPU and
  // most of a session's memory); these servers never validate anything with it (no elicitation).
  private readonly validator = new AjvJsonSchemaValidator()

  constructor(
    private readonly store: Store,
    monitor: Monitor,
    private readonly options: McpGatewayOptions
  ) {
    this.idleMs = options.idleSeconds * 1000
    this.unsubscribe = monitor.subscribe((e) => this.onMonitorEvent(e))
  }

  /** Tools a scope offers through MCP: those of its connected services (that a key's `gate` lets through). */
  private tools(scope: Scope, gate: ToolGate | undefined) {
    return Object.values(this.store.serviceActors(scope))
      .map((a) => a.getSnapshot())
      .filter((s) => statusOf(s) === "healthy" || statusOf(s) === "warning")
      .flatMap((s) => toolViewsFor(s, gate))
  }

  private toolNames(scope: Scope, gate: ToolGate | undefined): string {
    return this.tools(scope, gate)
      .map((t) => t.name)
      .sort()
      .join("\n")
  }

  private onMonitorEvent(e: MonitorEvent): void {
    if (e.type === "removed") {
      // Seen as the store's root receives the event, before the service leaves the scope's actors.
      if (!this.shuttingDown) setImmediate(() => this.announce(e.scope))
      return
    }
    if (e.type !== "status" && e.type !== "tools_changed") return
    this.announce(e.scope)
  }

  /** Sends list_changed to the sessions of a scope (a label) whose tool list is no longer the one they last got. */
  private announce(scope: string): void {
    // One tool list per scope and allow-list for the event, however many of its sessions are open.
    const lists = new Map<ToolGate | undefined, string>()
    for (const session of this.sessions.values()) {
      if (scopeLabel(session.scope) !== scope) continue
      let names = lists.get(session.gate)
      if (names === undefined) lists.set(session.gate, (names = this.toolNames(session.scope, session.gate)))
      if (names === session.listed) continue
      session.listed = names
      session.server.sendToolListChanged().catch(() => undefined)
    }
  }

  /** A new Streamable HTTP session, in the map at once (so concurrent initializations count against the cap). */
  private newSession(scope: Scope, gate: ToolGate | undefined): StreamableSession {
    const id = randomUUID()
    const session = this.addSession<StreamableSession>(scope, gate, { id, kind: "streamable", transport: new StreamableHTTPServerTransport({ sessionIdGenerator: () => id }) })
    session.transport.onclose = () => this.forget(session)
    return session
  }

  /** A session of either kind with its server, in the map at once. */
  private addSession<S extends Session>(scope: Scope, gate: ToolGate | undefined, parts: Pick<S, "id" | "kind" | "transport">): S {
    const state = { ...parts, scope, gate, listed: this.toolNames(scope, gate), busy: 0, touchedAt: performance.now() }
    // The handlers keep the very object that becomes the session (they update `listed`).
    const session = Object.assign(state, { server: this.buildServer(scope, state) }) as S
    this.sessions.set(session.id, session)
    return session
  }

  /** A session's SDK server and its handlers, the same for every transport. */
  private buildServer(scope: Scope, session: Omit<SessionState, "server">): Server {
    const server = new Server(
      { name: scope.kind === "store" ? "mcp-store" : `mcp-store/${scope.agentId}`, version: VERSION },
      { capabilities: { tools: { listChanged: true } }, jsonSchemaValidator: this.validator }
    )
    server.setRequestHandler(ListToolsRequestSchema, async () => {
      const tools = this.tools(scope, session.gate)
      session.listed = tools.map((t) => t.name).sort().join("\n")
      return {
        // Every MCP field of the upstream's tool, unchanged (src/runtime/views.ts); tools hidden
        // from agents (app-only, tasks required) are not in the list.
        tools: tools.map((t) => ({
          name: t.name,
          ...(t.title !== undefined ? { title: t.title } : {}),
          description: t.description,
          inputSchema: t.inputSchema as { type: "object" },
          ...(t.outputSchema !== undefined ? { outputSchema: t.outputSchema as { type: "object" } } : {}),
          ...(t.annotations !== undefined ? { annotations: t.annotations } : {}),
          ...(t.execution !== undefined ? { execution: t.execution } : {}),
          ...(t._meta !== undefined ? { _meta: t._meta } : {})
        }))
      }
    })
    server.setRequestHandler(CallToolRequestSchema, async (request, extra): Promise<CallToolResult> => {
      const api = (scope.kind === "store" ? this.store.forStore() : this.store.forAgent(scope.agentId)).gated(session.gate)
      try {
        const output = await api.callTool({ tool_name: request.params.name, args: request.params.arguments ?? {} }, extra.signal)
        return {
          content: output.content,
          ...(output.structured_content !== null ? { structuredContent: output.structured_content } : {}),
          ...(output.is_error ? { isError: true } : {})
        }
      } catch (e) {
        // Store errors (unknown tool, bad arguments, service down) are the tool's failure to the client.
        if (isStoreError(e)) return { content: [{ type: "text", text: e.message }], isError: true }
        throw e
      }
    })
    return server
  }

  /**
   * Handles one HTTP request of the MCP endpoint. `body` is the parsed JSON body (already read by
   * the HTTP layer). Resolves when the response is finished (a GET stream stays open until then).
   */
  async handle(scope: Scope, req: IncomingMessage, res: ServerResponse, body: unknown, gate?: ToolGate): Promise<void> {
    if (this.refusedWhileClosing(res)) return
    const id = req.headers["mcp-session-id"]
    const sessionId = Array.isArray(id) ? id[0] : id
    let session = sessionId !== undefined ? this.sessions.get(sessionId) : undefined
    if (session !== undefined && (session.kind !== "streamable" || scopeLabel(session.scope) !== scopeLabel(scope))) session = undefined
    const created = session === undefined
    if (session === undefined) {
      if (sessionId !== undefined || req.method !== "POST" || !initializes(body)) {
        // An unknown (expired) session is 404, a missing one is 400 (MCP, Streamable HTTP); only an
        // initialize request starts a session (so nothing is evicted for a stray request).
        if (sessionId !== undefined) jsonRpcError(res, 404, -32001, "Session not found")
        else jsonRpcError(res, 400, -32000, "Bad Request: Mcp-Session-Id header is required")
        return
      }
      if (!this.admit(res)) return
      session = this.newSession(scope, gate)
    }
    this.begin(session)
    try {
      if (created) await session.server.connect(session.transport)
      // A response whose connection is already gone emits no more "close".
      const finished = res.destroyed ? Promise.resolve() : new Promise<void>((resolve) => res.once("close", () => resolve()))
      await session.transport.handleRequest(req, res, body)
      if (!res.writableEnded) await finished
    } finally {
      this.end(session)
      // An initialization the transport refused (a batch, bad headers) leaves no session behind.
      if (created && session.transport.sessionId === undefined) this.closeSession(session)
    }
  }

  /**
   * GET of the legacy SSE endpoint (src/http/sse-endpoint.ts): a new session whose stream carries
   * every answer and notification, its first event the URL to POST messages to. Resolves when the
   * stream ends (the client left, the session expired or was closed, shutdown).
   */
  async openSse(scope: Scope, req: IncomingMessage, res: ServerResponse, gate?: ToolGate): Promise<void> {
    if (this.refusedWhileClosing(res)) return
    if (!acceptsEventStream(req)) return jsonRpcError(res, 406, -32000, "Not Acceptable: the client must accept text/event-stream")
    if (!this.admit(res)) return
    const transport = new SSEServerTransport(messagesPath(scope), res)
    const session = this.addSession<SseSession>(scope, gate, { id: transport.sessionId, kind: "sse", transport })
    transport.onclose = () => this.forget(session)
    watchRequests(transport, () => this.begin(session), () => this.end(session))
    const finished = res.destroyed ? Promise.resolve() : new Promise<void>((resolve) => res.once("close", () => resolve()))
    this.begin(session)
    try {
      await session.server.connect(transport)
    } finally {
      this.end(session)
    }
    // A client gone before the stream began: the transport saw no "close".
    if (res.destroyed) this.closeSession(session)
    await finished
  }

  /** POST of the legacy SSE endpoint: one JSON-RPC message of a session of this scope (answered 202; the answer goes on its stream). */
  async postMessage(scope: Scope, req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    if (this.refusedWhileClosing(res)) return
    const id = sessionIdOf(req)
    if (id === undefined) return jsonRpcError(res, 400, -32000, "Bad Request: the sessionId query parameter is required")
    const session = this.sessions.get(id)
    // A session of another scope, or of the other transport, is unknown here.
    if (session?.kind !== "sse" || scopeLabel(session.scope) !== scopeLabel(scope)) return jsonRpcError(res, 404, -32001, "Session not found")
    if (!JSONRPCMessageSchema.safeParse(body).success) return jsonRpcError(res, 400, -32600, "Invalid Request: the body must be one JSON-RPC message")
    this.begin(session)
    try {
      await session.transport.handlePostMessage(req, res, body)
    } catch {
      // The stream ended meanwhile: the transport has answered 500 and the session is gone.
    } finally {
      this.end(session)
    }
  }

  /** Answers 503 once shutdown has begun; true when it did. */
  private refusedWhileClosing(res: ServerResponse): boolean {
    if (this.shuttingDown) jsonRpcError(res, 503, -32000, "Server shutting down", { connection: "close" })
    return this.shuttingDown
  }

  /** Makes room for a new session, or answers 429 with Retry-After when every session is busy; true when admitted. */
  private admit(res: ServerResponse): boolean {
    if (this.makeRoom()) return true
    const max = this.options.maxSessions
    const message = `Too many MCP sessions: all ${max} are busy; try again later`
    jsonRpcError(res, 429, -32000, message, { "retry-after": String(MCP_RETRY_AFTER_SECONDS) }, {
      code: "TOO_MANY",
      details: { limit: "max_mcp_sessions", max, retry_after_seconds: MCP_RETRY_AFTER_SECONDS }
    })
    return false
  }

  /** Moves a session to the end of the map: the map stays in order of last activity. */
  private touch(session: Session): void {
    session.touchedAt = performance.now()
    if (this.sessions.get(session.id) !== session) return
    this.sessions.delete(session.id)
    this.sessions.set(session.id, session)
  }

  private begin(session: Session): void {
    session.busy += 1
    this.touch(session)
  }

  private end(session: Session): void {
    session.busy -= 1
    this.touch(session)
    if (session.busy === 0 && this.sessions.has(session.id)) this.armSweep(session.touchedAt + this.idleMs)
  }

  /** At the cap, closes the oldest idle session; false when every session is busy (an SSE session's open stream counts). */
  private makeRoom(): boolean {
    if (this.sessions.size < this.options.maxSessions) return true
    for (const session of this.sessions.values()) {
      if (session.busy > 0 || session.kind === "sse") continue
      this.closeSession(session)
      return true
    }
    return false
  }

  /** Closes a session: its SDK server and transport (open streams end); it leaves the map at once. */
  private closeSession(session: Session): void {
    this.forget(session)
    session.server.close().catch(() => undefined)
  }

  private forget(session: Session): void {
    if (this.sessions.get(session.id) !== session) return
    this.sessions.delete(session.id)
    if (this.sessions.size === 0) this.clearSweep()
  }

  /** Makes sure the expiry sweep runs at `at` (performance.now() time) or earlier. */
  private armSweep(at: number): void {
    if (this.sweepTimer !== undefined && this.sweepAt <= at) return
    clearTimeout(this.sweepTimer)
    this.sweepAt = at
    this.sweepTimer = setTimeout(this.sweep, Math.min(MAX_TIMER_MS, Math.max(1, Math.ceil(at - performance.now()))))
    this.sweepTimer.unref()
  }

  private clearSweep(): void {
    clearTimeout(this.sweepTimer)
    this.sweepTimer = undefined
    this.sweepAt = Number.POSITIVE_INFINITY
  }

  /** Closes the sessions idle for `idleSeconds`, then waits for the next one to come due. */
  private readonly sweep = (): void => {
    this.sweepTimer = undefined
    this.sweepAt = Number.POSITIVE_INFINITY
    const now = performance.now()
    const expired: Session[] = []
    for (const session of this.sessions.values()) {
      if (session.busy > 0) continue
      if (now - session.touchedAt < this.idleMs) {
        // The map is in order of activity: every later idle session is due later still.
        this.armSweep(session.touchedAt + this.idleMs)
        break
      }
      expired.push(session)
    }
    for (const session of expired) this.closeSession(session)
  }

  /** Shutdown has begun: refuse new requests and end every session's standalone GET stream (an SSE session with it). */
  shutdown(): void {
    this.shuttingDown = true
    for (const s of this.sessions.values()) {
      if (s.kind === "sse") this.closeSession(s)
      else s.transport.closeStandaloneSSEStream()
    }
  }

  /** Open sessions, those still initializing included. */
  get size(): number {
    return this.sessions.size
  }

  /** Ends every session. */
  async close(): Promise<void> {
    this.unsubscribe()
    this.clearSweep()
    const sessions = [...this.sessions.values()]
    this.sessions.clear()
    await Promise.all(sessions.map((s) => s.server.close().catch(() => undefined)))
  }
}
