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
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import { randomUUID } from "node:crypto"
import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv"
import {
  CallToolRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
  ErrorCode,
  isInitializeRequest,
  ListToolsRequestSchema,
  McpError,
  type CallToolResult
} from "@modelcontextprotocol/sdk/types.js"
import { scopeLabel, type Scope } from "../domain/service.js"
import { statusOf } from "../machines/service.js"
import type { Monitor, MonitorEvent } from "../monitoring/monitor.js"
import type { CallProgress } from "../mcp/types.js"
import { isStoreError } from "../runtime/errors.js"
import { LatestThrottle } from "../runtime/progress.js"
import type { Store } from "../runtime/store.js"
import { toolViews } from "../runtime/views.js"
import { VERSION } from "../version.js"

interface Session {
  readonly id: string
  readonly transport: StreamableHTTPServerTransport
  readonly server: Server
  readonly scope: Scope
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

  /** Tools a scope offers through MCP: those of its connected services. */
  private tools(scope: Scope) {
    return Object.values(this.store.serviceActors(scope))
      .map((a) => a.getSnapshot())
      .filter((s) => statusOf(s) === "healthy" || statusOf(s) === "warning")
      .flatMap((s) => toolViews(s))
  }

  private toolNames(scope: Scope): string {
    return this.tools(scope)
      .map((t) => t.name)
      .sort()
      .join("\n")
  }

  private onMonitorEvent(e: MonitorEvent): void {
    if (e.type !== "status" && e.type !== "tools_changed") return
    // One tool list per scope for the event, however many of its sessions are open.
    let names: string | undefined
    for (const session of this.sessions.values()) {
      if (scopeLabel(session.scope) !== e.scope) continue
      names ??= this.toolNames(session.scope)
      if (names === session.listed) continue
      session.listed = names
      session.server.sendToolListChanged().catch(() => undefined)
    }
  }

  /** A new session, in the map at once (so concurrent initializations count against the cap). */
  private newSession(scope: Scope): Session {
    const server = new Server(
      { name: scope.kind === "store" ? "mcp-store" : `mcp-store/${scope.agentId}`, version: VERSION },
      { capabilities: { tools: { listChanged: true } }, jsonSchemaValidator: this.validator }
    )
    const id = randomUUID()
    const session: Session = {
      id,
      scope,
      server,
      listed: this.toolNames(scope),
      busy: 0,
      touchedAt: performance.now(),
      transport: new StreamableHTTPServerTransport({ sessionIdGenerator: () => id })
    }
    this.sessions.set(id, session)
    session.transport.onclose = () => this.forget(session)
    server.setRequestHandler(ListToolsRequestSchema, async () => {
      const tools = this.tools(scope)
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
      const api = scope.kind === "store" ? this.store.forStore() : this.store.forAgent(scope.agentId)
      // The client's progressToken: each upstream progress comes back to it, the latest only while
      // one is still being sent (a flood is coalesced, src/runtime/progress.ts).
      const token = request.params._meta?.progressToken
      const progress =
        token === undefined
          ? undefined
          : new LatestThrottle<CallProgress>(0, (p) =>
              extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, ...p } })
            )
      try {
        // No time-out of its own: the call lasts while the client's request is open (its
        // notifications/cancelled aborts `extra.signal`), up to --max-call-seconds.
        const output = await api.callTool(
          {
            tool_name: request.params.name,
            args: request.params.arguments ?? {},
            timeout: this.store.limits.maxCallSeconds,
            ...(progress !== undefined ? { onProgress: (p: CallProgress) => progress.push(p) } : {}),
            // The upstream's elicitation and sampling go to this client, on this request's stream.
            relay: (req, { signal, timeoutMs }) => {
              const capability = req.method === "elicitation/create" ? "elicitation" : "sampling"
              if (session.server.getClientCapabilities()?.[capability] === undefined) {
                return Promise.reject(
                  new McpError(ErrorCode.InvalidRequest, `mcp-store declined ${req.method}: the MCP client that made this call did not declare the ${capability} capability`)
                )
              }
              const schema = capability === "elicitation" ? ElicitResultSchema : CreateMessageResultSchema
              return extra.sendRequest(req as never, schema, { signal, timeout: timeoutMs }) as Promise<Record<string, unknown>>
            }
          },
          extra.signal
        )
        return {
          content: output.content,
          ...(output.structured_content !== null ? { structuredContent: output.structured_content } : {}),
          ...(output.is_error ? { isError: true } : {})
        }
      } catch (e) {
        // Store errors (unknown tool, bad arguments, service down) are the tool's failure to the client.
        if (isStoreError(e)) return { content: [{ type: "text", text: e.message }], isError: true }
        throw e
      } finally {
        progress?.close()
      }
    })
    return session
  }

  /**
   * Handles one HTTP request of the MCP endpoint. `body` is the parsed JSON body (already read by
   * the HTTP layer). Resolves when the response is finished (a GET stream stays open until then).
   */
  async handle(scope: Scope, req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    if (this.shuttingDown) {
      jsonRpcError(res, 503, -32000, "Server shutting down", { connection: "close" })
      return
    }
    const id = req.headers["mcp-session-id"]
    const sessionId = Array.isArray(id) ? id[0] : id
    let session = sessionId !== undefined ? this.sessions.get(sessionId) : undefined
    if (session !== undefined && scopeLabel(session.scope) !== scopeLabel(scope)) session = undefined
    const created = session === undefined
    if (session === undefined) {
      if (sessionId !== undefined || req.method !== "POST" || !initializes(body)) {
        // An unknown (expired) session is 404, a missing one is 400 (MCP, Streamable HTTP); only an
        // initialize request starts a session (so nothing is evicted for a stray request).
        if (sessionId !== undefined) jsonRpcError(res, 404, -32001, "Session not found")
        else jsonRpcError(res, 400, -32000, "Bad Request: Mcp-Session-Id header is required")
        return
      }
      if (!this.makeRoom()) {
        const max = this.options.maxSessions
        const message = `Too many MCP sessions: all ${max} are busy; try again later`
        jsonRpcError(res, 429, -32000, message, { "retry-after": String(MCP_RETRY_AFTER_SECONDS) }, {
          code: "TOO_MANY",
          details: { limit: "max_mcp_sessions", max, retry_after_seconds: MCP_RETRY_AFTER_SECONDS }
        })
        return
      }
      session = this.newSession(scope)
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

  /** At the cap, closes the oldest idle session; false when every session is busy. */
  private makeRoom(): boolean {
    if (this.sessions.size < this.options.maxSessions) return true
    for (const session of this.sessions.values()) {
      if (session.busy > 0) continue
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

  /** Shutdown has begun: refuse new requests and end every session's standalone GET stream. */
  shutdown(): void {
    this.shuttingDown = true
    for (const s of this.sessions.values()) s.transport.closeStandaloneSSEStream()
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
