/**
 * The store as one MCP server: `/mcp` exposes the store scope's tools and `/for_agent/{id}/mcp`
 * an agent's, over Streamable HTTP, so any MCP client (an IDE, an agent framework, the MCP
 * Inspector) can use them. Tools keep their callable names (`<service>__<tool>`); only services
 * that are healthy or warning are listed; `notifications/tools/list_changed` goes out when that set
 * changes; calls go through the same operation as HTTP calls, so they are recorded the same way.
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import { randomUUID } from "node:crypto"
import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js"
import { scopeLabel, type Scope } from "../domain/service.js"
import { statusOf } from "../machines/service.js"
import type { MonitorEvent } from "../monitoring/monitor.js"
import { isStoreError } from "../runtime/errors.js"
import type { Store } from "../runtime/store.js"
import { toolViews } from "../runtime/views.js"
import { VERSION } from "../version.js"

interface Session {
  readonly transport: StreamableHTTPServerTransport
  readonly server: Server
  readonly scope: Scope
  /** Names of the tools last announced, to tell whether the set changed. */
  listed: string
}

/** The MCP endpoint's sessions, for every scope. Owned by the HTTP server; `close()` ends them. */
export class McpGateway {
  private readonly sessions = new Map<string, Session>()
  private readonly unsubscribe: () => void

  constructor(private readonly store: Store) {
    this.unsubscribe = store.monitor.subscribe((e) => this.onMonitorEvent(e))
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
    for (const session of this.sessions.values()) {
      if (scopeLabel(session.scope) !== e.scope) continue
      const names = this.toolNames(session.scope)
      if (names === session.listed) continue
      session.listed = names
      session.server.sendToolListChanged().catch(() => undefined)
    }
  }

  private newSession(scope: Scope): Session {
    const server = new Server(
      { name: scope.kind === "store" ? "mcp-store" : `mcp-store/${scope.agentId}`, version: VERSION },
      { capabilities: { tools: { listChanged: true } } }
    )
    const session: Session = {
      scope,
      server,
      listed: this.toolNames(scope),
      transport: new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => {
          this.sessions.set(id, session)
        }
      })
    }
    session.transport.onclose = () => {
      if (session.transport.sessionId) this.sessions.delete(session.transport.sessionId)
    }
    server.setRequestHandler(ListToolsRequestSchema, async () => {
      const tools = this.tools(scope)
      session.listed = tools.map((t) => t.name).sort().join("\n")
      return {
        tools: tools.map((t) => ({
          name: t.name,
          description: t.description,
          inputSchema: t.inputSchema as { type: "object" },
          ...(t.annotations !== undefined ? { annotations: t.annotations } : {})
        }))
      }
    })
    server.setRequestHandler(CallToolRequestSchema, async (request, extra): Promise<CallToolResult> => {
      const api = scope.kind === "store" ? this.store.forStore() : this.store.forAgent(scope.agentId)
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
    return session
  }

  /**
   * Handles one HTTP request of the MCP endpoint. `body` is the parsed JSON body (already read by
   * the HTTP layer). Resolves when the response is finished (a GET stream stays open until then).
   */
  async handle(scope: Scope, req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    if (this.shuttingDown) {
      res.writeHead(503, { "content-type": "application/json", connection: "close" }).end(
        JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message: "Server shutting down" }, id: null })
      )
      return
    }
    const id = req.headers["mcp-session-id"]
    const sessionId = Array.isArray(id) ? id[0] : id
    let session = sessionId !== undefined ? this.sessions.get(sessionId) : undefined
    if (session !== undefined && scopeLabel(session.scope) !== scopeLabel(scope)) session = undefined
    if (session === undefined) {
      if (sessionId !== undefined || req.method !== "POST") {
        // An unknown (expired) session is 404, a missing one on GET/DELETE is 400 (MCP, Streamable HTTP).
        const status = sessionId !== undefined ? 404 : 400
        const message = sessionId !== undefined ? "Session not found" : "Mcp-Session-Id header is required"
        res.writeHead(status, { "content-type": "application/json" }).end(
          JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message }, id: null })
        )
        return
      }
      session = this.newSession(scope)
      await session.server.connect(session.transport)
    }
    const finished = new Promise<void>((resolve) => res.once("close", () => resolve()))
    await session.transport.handleRequest(req, res, body)
    if (!res.writableEnded) await finished
  }

  private shuttingDown = false

  /** Shutdown has begun: refuse new requests and end every session's standalone GET stream. */
  shutdown(): void {
    this.shuttingDown = true
    for (const s of this.sessions.values()) s.transport.closeStandaloneSSEStream()
  }

  /** Open sessions. */
  get size(): number {
    return this.sessions.size
  }

  /** Ends every session. */
  async close(): Promise<void> {
    this.unsubscribe()
    await Promise.all([...this.sessions.values()].map((s) => s.server.close().catch(() => undefined)))
    this.sessions.clear()
  }
}
