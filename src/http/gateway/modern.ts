/**
 * The MCP endpoint's 2026-07-28 face: `/mcp` and `/for_agent/{id}/mcp` answer sessionless requests
 * (each carries its protocol version and client facts in `_meta`) beside the 2025 sessions of
 * endpoint.ts, on the same URLs. The SDK's classifier (`classifyInboundRequest`, as its
 * `isLegacyRequest` runs it) routes each request: 2025 traffic (initialize, a session's requests,
 * GET and DELETE) to the sessions, everything else to a `createMcpHandler` (SDK v2, modern only),
 * which owns the wire rules: `server/discover`, the `_meta` envelope, `Mcp-Method`/`Mcp-Name`
 * against the body (-32020), unsupported versions (-32022), `resultType`, `ttlMs`/`cacheScope`,
 * progress on the request's own stream. The handler is served at the Node level (`serveNode`):
 * the HTTP layer has parsed the body, so the web Request it is given carries headers only.
 *
 * Each request gets a fresh SDK server for its caller (scope, the key's tool allow-list), nothing
 * of it kept after the answer; calls go through the same pipeline as every other call (face.ts).
 * A call, read or prompt whose upstream asks for input is held by the store for a client that
 * declared the capability, answered `input_required` and taken back by its retry (`inputTurnOf`).
 * `subscriptions/listen` streams are fed by the store's own events, per scope and per key
 * (`ListenBus`), and capped; at shutdown they end gracefully.
 */
import { AsyncLocalStorage } from "node:async_hooks"
import type { IncomingMessage, ServerResponse } from "node:http"
import { Cause, Exit, type Effect } from "effect"
import {
  CLIENT_CAPABILITIES_META_KEY,
  LOG_LEVEL_META_KEY,
  classifyInboundRequest,
  createMcpHandler,
  inputRequired,
  type ClientCapabilities,
  ProtocolError,
  ResourceNotFoundError,
  Server,
  type CacheHint,
  type LoggingLevel,
  type LoggingMessageNotification,
  type ServerContext,
  type McpHttpHandler,
  type ServerEvent,
  type ServerEventBus
} from "@modelcontextprotocol/server"
import { LoggingLevelSchema } from "@modelcontextprotocol/core"
// The engine's error currency (src/mcp/session.ts): a declined upstream request travels back to it as one.
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js"
import { isStoreError, ValidationError } from "../../domain/errors.js"
import { scopeLabel, type Scope } from "../../domain/service-definition.js"
import { readTraceContext } from "../../domain/trace-context.js"
import type { ToolGate } from "../../domain/tool-filter.js"
import { log } from "../../logging/log.js"
import type { Monitor, MonitorEvent } from "../../monitoring/monitor.js"
import type { CallProgress, UpstreamRequestRelay } from "../../mcp/types.js"
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js"
import * as catalog from "../../runtime/catalog.js"
import { runToPromise } from "../../runtime/run.js"
import type { Store } from "../../runtime/store.js"
import {
  callOverMcp,
  heldCallOverMcp,
  heldOverMcp,
  type HeldAnswer,
  type InputTurn,
  mcpPrompts,
  mcpServer,
  mcpResources,
  mcpResourceTemplates,
  mcpTool,
  namesOf,
  offeredTools,
  scopeContext
} from "./face.js"

/** Who a modern request comes from: what its answers may show, and whether they depend on its key. */
export interface ModernCaller {
  readonly scope: Scope
  /** The key's tool allow-list (an agent key's `tools`). */
  readonly gate: ToolGate | undefined
  /** `private` when the answers depend on the caller's key (an agent key), else `public`. */
  readonly cacheScope: "public" | "private"
  /** Who holds the caller's key (a digest): only the same key takes back a call held for its input. */
  readonly owner: string
  /** The resource URIs a `subscriptions/listen` request asks updates of. */
  readonly resourceSubscriptions?: ReadonlyArray<string> | undefined
}

/** What the modern face shares with the 2025 sessions (`McpGateway`): the upstream resource subscriptions and the log relay. */
export interface SessionSide {
  subscribeStream(scope: Scope, uris: ReadonlyArray<string>, onUpdate: (uri: string) => void): () => void
  hearLogs(scope: Scope, service: string, level: LoggingLevel, send: (message: LoggingMessageNotification["params"]) => void): () => void
}

/** How long a client may keep a tool, resource or prompt list (ms): list changes come on `subscriptions/listen` at once. */
export const LIST_TTL_MS = 5_000

/** The caps of the modern face. */
export interface ModernOptions {
  /** Open `subscriptions/listen` streams, every scope and key together (beyond it: -32603 "Subscription limit reached"). */
  readonly maxListenStreams: number
}

/**
 * The change events of `subscriptions/listen` streams, scoped: each stream is registered with its
 * caller (read from the request it was opened by) and told only of its own scope's changes, and of
 * a tool list change only when the list its key sees changed (as the 2025 sessions are).
 */
export class ListenBus implements ServerEventBus {
  private readonly listeners = new Set<Listener>()

  constructor(
    private readonly store: Store,
    private readonly callers: AsyncLocalStorage<ModernCaller>,
    private readonly resources: SessionSide
  ) {}

  /**
   * The SDK's unscoped publish (`handler.notify`): refused, since it would reach every scope's
   * streams. The store announces through `toolsChanged`, `catalogChanged` and resource updates.
   */
  publish(event: ServerEvent): void {
    throw new Error(`mcp-store announces ${event.kind} per scope, not to every subscriptions/listen stream`)
  }

  /** Called by the SDK's listen router as a stream opens, inside the request that opened it. */
  subscribe(deliver: (event: ServerEvent) => void): () => void {
    const caller = this.callers.getStore()
    // Every listen stream is opened by a request of the modern face, which runs with its caller.
    if (caller === undefined) throw new Error("subscriptions/listen opened outside a request of the MCP endpoint")
    const ctx = scopeContext(this.store, caller.scope)
    const listener: Listener = {
      caller,
      label: scopeLabel(caller.scope),
      listed: namesOf(offeredTools(this.store, caller.scope, caller.gate)),
      catalogListed: catalog.catalogFingerprint(ctx),
      deliver
    }
    this.listeners.add(listener)
    // The SDK delivers an update only to a stream that asked for its URI (and only when `subscribe` is offered).
    const uris = caller.resourceSubscriptions ?? []
    const unsubscribe = uris.length > 0 && catalog.scopeCapabilities(ctx).subscribe ? this.resources.subscribeStream(caller.scope, uris, (uri) => deliver({ kind: "resource_updated", uri })) : undefined
    return () => {
      this.listeners.delete(listener)
      unsubscribe?.()
    }
  }

  /** A scope's tool lists may have changed: tell each of its streams whose list did. */
  toolsChanged(label: string): void {
    const lists = new Map<ToolGate | undefined, string>()
    for (const l of this.listeners) {
      if (l.label !== label) continue
      let names = lists.get(l.caller.gate)
      if (names === undefined) lists.set(l.caller.gate, (names = namesOf(offeredTools(this.store, l.caller.scope, l.caller.gate))))
      if (names === l.listed) continue
      l.listed = names
      l.deliver({ kind: "tools_list_changed" })
    }
  }

  /** A scope's resource or prompt lists may have changed: tell each of its streams whose list did. */
  catalogChanged(label: string): void {
    let lists: ReturnType<typeof catalog.catalogFingerprint> | undefined
    for (const l of this.listeners) {
      if (l.label !== label) continue
      lists ??= catalog.catalogFingerprint(scopeContext(this.store, l.caller.scope))
      if (lists.resources !== l.catalogListed.resources) l.deliver({ kind: "resources_list_changed" })
      if (lists.prompts !== l.catalogListed.prompts) l.deliver({ kind: "prompts_list_changed" })
      l.catalogListed = lists
    }
  }

  /** Open streams. */
  get size(): number {
    return this.listeners.size
  }
}

interface Listener {
  readonly caller: ModernCaller
  readonly label: string
  /** The tool names last announced to the stream (or seen when it opened). */
  listed: string
  catalogListed: { readonly resources: string; readonly prompts: string }
  readonly deliver: (event: ServerEvent) => void
}

/** A catalog failure as the 2026-07-28 error a client understands (a missing resource is -32602 with its URI). */
const protocolErrorOf = (e: unknown): unknown => {
  if (!isStoreError(e)) return e
  switch (e._tag) {
    case "ResourceNotFound":
      return new ResourceNotFoundError(e.uri, e.message)
    case "PromptNotFound":
    case "ValidationError":
      return new ProtocolError(-32602, e.message)
    default:
      return new ProtocolError(-32603, e.message)
  }
}

/**
 * An upstream's elicitation or sampling during a modern request (`what`: a call, a read, a prompt
 * request) whose client declared neither capability (one that did answers `input_required`
 * results, through a held call): declined, in words that say why.
 */
const declinedOnModern =
  (what: string): UpstreamRequestRelay =>
  (request) =>
    Promise.reject(
      new McpError(
        ErrorCode.InvalidRequest,
        `mcp-store declined ${request.method}: the MCP 2026-07-28 client that made this ${what} did not declare the capability to answer it`
      )
    )

/**
 * How a modern request that may need input (tools/call, resources/read, prompts/get) takes part
 * in rounds: undefined when its client declared neither elicitation nor sampling (the upstream's
 * requests are then declined), else the requests it can answer and, for a retry, its state and
 * answers.
 */
const inputTurnOf = (c: ServerContext): InputTurn | undefined => {
  const envelope = c.mcpReq.envelope as Record<string, unknown> | undefined
  const capabilities = envelope?.[CLIENT_CAPABILITIES_META_KEY] as ClientCapabilities | undefined
  if (capabilities?.elicitation === undefined && capabilities?.sampling === undefined) return undefined
  const state = c.mcpReq.requestState<unknown>()
  return {
    retry: typeof state === "string" ? { state, responses: c.mcpReq.inputResponses ?? {} } : undefined,
    accepts: (method) => (method === "elicitation/create" ? capabilities.elicitation !== undefined : method === "sampling/createMessage" && capabilities.sampling !== undefined)
  }
}

/** A held request's round as the SDK answers it: its end (`ended`), or an `input_required` result with the store's state. */
const roundResult = <A, R>(held: HeldAnswer<A>, ended: (a: A) => R): R => {
  if ("inputRequests" in held) return inputRequired({ inputRequests: held.inputRequests as never, requestState: held.requestState }) as never
  return ended(held.ended)
}

/** A retry whose state does not fit its call, as the client's invalid params (-32602); anything else as it is. */
const retryRefused = (e: unknown): unknown => (e instanceof ValidationError ? new ProtocolError(ErrorCode.InvalidParams, e.message) : e)

/** The JSON-RPC error a refused request gets (503 while shutting down). */
const refuse = (res: ServerResponse, status: number, message: string) =>
  void res.writeHead(status, { "content-type": "application/json", connection: "close" }).end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message }, id: null }))

/**
 * A 2025-era request told without running the SDK's classifier: one JSON-RPC message with no `io.modelcontextprotocol/` key in its `_meta` and no 2026-era
 * MCP-Protocol-Version header is legacy by the classifier's own rules (`classifyInboundRequest`:
 * no envelope claim and no modern header). Anything else is left to the classifier.
 */
const plainlyLegacy = (req: IncomingMessage, body: unknown): boolean => {
  const version = req.headers["mcp-protocol-version"]
  if (version !== undefined && !(typeof version === "string" && /^\s*20(24|25)-/.test(version))) return false
  if (typeof body !== "object" || body === null || Array.isArray(body)) return false
  const params = (body as { params?: unknown }).params
  if (params === undefined) return true
  if (typeof params !== "object" || params === null) return false
  const meta = (params as { _meta?: unknown })._meta
  if (meta === undefined) return true
  if (typeof meta !== "object" || meta === null) return false
  for (const key in meta) if (key.startsWith("io.modelcontextprotocol/")) return false
  return true
}

/** The value of a request header as a web `Headers` would give it (repeated headers joined with ", "). */
const headerOf = (req: IncomingMessage, name: string): string | undefined => {
  const value = req.headers[name]
  return Array.isArray(value) ? value.join(", ") : value
}

/**
 * Whether the SDK routes a POST with this parsed body to the 2025 era: what `isLegacyRequest`
 * decides given the body (it runs `classifyInboundRequest` on the method, the standard headers and
 * the body; no body is legacy), without the web Request it would be handed.
 */
const legacyByClassifier = (req: IncomingMessage, body: unknown): boolean => {
  if (body === undefined) return true
  const protocolVersionHeader = headerOf(req, "mcp-protocol-version")
  const mcpMethodHeader = headerOf(req, "mcp-method")
  const mcpNameHeader = headerOf(req, "mcp-name")
  const outcome = classifyInboundRequest({
    httpMethod: "POST",
    ...(protocolVersionHeader !== undefined ? { protocolVersionHeader } : {}),
    ...(mcpMethodHeader !== undefined ? { mcpMethodHeader } : {}),
    ...(mcpNameHeader !== undefined ? { mcpNameHeader } : {}),
    body
  })
  return outcome.kind === "legacy"
}

/**
 * The web `Request` the SDK's handler is given for a POST whose body is already parsed (the handler
 * reads the parsed body, never the request's): its URL, method and headers, no body, and `signal`,
 * aborted when the client goes (the SDK then closes the request's exchange). The signal is set on
 * the request rather than passed to its constructor, which would make the request follow it with
 * a signal of its own (a dependent signal and its bookkeeping, per request).
 */
const requestOf = (req: IncomingMessage, signal: AbortSignal): Request => {
  const headers: Record<string, string> = {}
  for (const name in req.headers) {
    if (name.startsWith(":") || name === "content-encoding" || name === "transfer-encoding" || name === "content-length") continue
    const value = headerOf(req, name)
    if (value !== undefined) headers[name] = value
  }
  const request = new Request(`http://${headerOf(req, "host") ?? "localhost"}${req.url ?? "/"}`, { method: "POST", headers })
  Object.defineProperty(request, "signal", { value: signal })
  return request
}

/** The JSON-RPC id an error answer echoes: the body's, when it is one request with a string or number id. */
const echoableId = (body: unknown): string | number | null => {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return null
  const { method, id } = body as { method?: unknown; id?: unknown }
  return typeof method === "string" && (typeof id === "string" || typeof id === "number") ? id : null
}

/**
 * Serves one POST (its body parsed) with a `createMcpHandler` handler, at the Node level: what
 * `toNodeHandler` of @modelcontextprotocol/node does, without serializing the parsed body again
 * into the request, and with a JSON answer written in one piece (an event stream is written as it
 * comes, minding back-pressure). Resolves when the response is finished.
 */
const serveNode = async (handler: McpHttpHandler, req: IncomingMessage, res: ServerResponse, body: unknown, onerror: (e: Error) => void): Promise<void> => {
  let finished = false
  const abort = new AbortController()
  res.on("close", () => {
    if (!finished) abort.abort()
  })
  if (res.destroyed) abort.abort()
  let response: Response
  try {
    response = await handler.fetch(requestOf(req, abort.signal), { parsedBody: body })
  } catch (error) {
    onerror(error instanceof Error ? error : new Error(String(error)))
    response = Response.json({ jsonrpc: "2.0", error: { code: -32603, message: "Internal server error" }, id: echoableId(body) }, { status: 500 })
  }
  const headers: Record<string, string> = {}
  for (const [name, value] of response.headers) headers[name] = value
  if (response.body === null) {
    finished = true
    res.writeHead(response.status, headers).end()
    return
  }
  if (!(response.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    const bytes = Buffer.from(await response.arrayBuffer().catch(() => new ArrayBuffer(0)))
    finished = true
    res.writeHead(response.status, headers).end(bytes)
    return
  }
  res.writeHead(response.status, headers)
  let drained: (() => void) | undefined
  res.on("drain", () => {
    drained?.()
    drained = undefined
  })
  const closed = new Promise<void>((resolve) => abort.signal.addEventListener("abort", () => resolve(), { once: true }))
  try {
    for await (const chunk of response.body) {
      if (abort.signal.aborted) break
      if (!res.write(chunk)) await Promise.race([new Promise<void>((resolve) => (drained = resolve)), closed])
    }
  } catch {
    // The stream failed or was cancelled: the response ends here.
  }
  finished = true
  res.end()
}

/** The filter of a `subscriptions/listen` request (undefined for any other body); its URIs only when they are strings (else the SDK refuses the filter). */
const listenFilterOf = (body: unknown): { readonly resourceSubscriptions: ReadonlyArray<string> | undefined } | undefined => {
  if (typeof body !== "object" || body === null || (body as { method?: unknown }).method !== "subscriptions/listen") return undefined
  const uris = (body as { params?: { notifications?: { resourceSubscriptions?: unknown } } }).params?.notifications?.resourceSubscriptions
  return { resourceSubscriptions: Array.isArray(uris) && uris.every((u) => typeof u === "string") ? uris : undefined }
}

/**
 * The 2026-07-28 face of the MCP endpoint, for every scope. Owned by the HTTP server with the
 * sessions (`McpGateway`); `shutdown()` ends the listen streams, `close()` the rest.
 */
export class ModernMcp {
  private readonly callers = new AsyncLocalStorage<ModernCaller>()
  readonly bus: ListenBus
  /** Every request but `subscriptions/listen`. */
  private readonly requests: McpHttpHandler
  /** `subscriptions/listen` only: its own handler, so that shutdown ends the streams without aborting calls in flight. */
  private readonly listens: McpHttpHandler
  private readonly onerror = (e: Error) => log.debug(`MCP 2026-07-28 request: ${e.message}`, { event: "mcp_modern_error" })
  private readonly unsubscribeMonitor: () => void
  private closing = false

  constructor(
    private readonly store: Store,
    monitor: Monitor,
    private readonly resources: SessionSide,
    options: ModernOptions
  ) {
    this.bus = new ListenBus(store, this.callers, resources)
    const factory = () => {
      const caller = this.callers.getStore()
      if (caller === undefined) throw new Error("a modern MCP request outside the endpoint's routing")
      return this.buildServer(caller)
    }
    const onerror = this.onerror
    this.requests = createMcpHandler(factory, { legacy: "reject", onerror })
    this.listens = createMcpHandler(factory, { legacy: "reject", onerror, bus: this.bus, maxSubscriptions: options.maxListenStreams })
    this.unsubscribeMonitor = monitor.subscribe((e) => this.onMonitorEvent(e))
  }

  private onMonitorEvent(e: MonitorEvent): void {
    if (this.bus.size === 0) return
    if (e.type === "status" || e.type === "catalog_changed") this.bus.catalogChanged(e.scope)
    if (e.type === "removed") {
      // Seen as the store's root receives the event, before the service leaves the scope's actors.
      if (!this.closing) setImmediate(() => this.bus.toolsChanged(e.scope))
      return
    }
    if (e.type === "status" || e.type === "tools_changed") this.bus.toolsChanged(e.scope)
  }

  /**
   * Handles one HTTP request of `/mcp` or `/for_agent/{id}/mcp`: a 2025 one goes to `legacy` (the
   * sessions), a modern one is answered here. `body` is the parsed JSON body (read by the HTTP
   * layer, under its size limit). Resolves when the response is finished.
   */
  async handle(
    caller: ModernCaller,
    req: IncomingMessage,
    res: ServerResponse,
    body: unknown,
    legacy: (req: IncomingMessage, res: ServerResponse, body: unknown) => Promise<void>
  ): Promise<void> {
    // GET and DELETE are 2025 session operations; a POST is classified by the SDK's rules.
    if (req.method !== "POST" || plainlyLegacy(req, body) || legacyByClassifier(req, body)) return legacy(req, res, body)
    if (this.closing) return refuse(res, 503, "Server shutting down")
    const listen = listenFilterOf(body)
    if (listen === undefined) return this.callers.run(caller, () => serveNode(this.requests, req, res, body, this.onerror))
    await this.callers.run({ ...caller, resourceSubscriptions: listen.resourceSubscriptions }, () => serveNode(this.listens, req, res, body, this.onerror))
  }

  /** A fresh SDK server for one request of `caller`: what its scope offers, as its key sees it. */
  private buildServer(caller: ModernCaller): Server {
    const { scope, gate, cacheScope } = caller
    const ctx = () => scopeContext(this.store, scope)
    const offers = catalog.scopeCapabilities(ctx())
    // `logging`: the called service's log messages, on a call's own stream when its `_meta` asks for them.
    const list: CacheHint = { ttlMs: LIST_TTL_MS, cacheScope }
    const server = mcpServer(scope, offers, {
      cacheHints: {
        "tools/list": list,
        "prompts/list": list,
        "resources/list": list,
        "resources/templates/list": list,
        // A read is the upstream's answer of the moment.
        "resources/read": { ttlMs: 0, cacheScope },
        // The scope's capabilities: the same for every key of the URL.
        "server/discover": { ttlMs: LIST_TTL_MS, cacheScope: "public" }
      }
    })
    const run = <A>(effect: Parameters<typeof runToPromise<A, unknown>>[0], signal: AbortSignal) =>
      runToPromise(effect, signal).catch((e: unknown) => {
        throw protocolErrorOf(e)
      })

    server.setRequestHandler("tools/list", async () => ({ tools: offeredTools(this.store, scope, gate).map(mcpTool) }) as never)
    server.setRequestHandler("tools/call", async (request, c) => {
      const token = c.mcpReq._meta?.progressToken ?? request.params._meta?.progressToken
      const call = {
        name: request.params.name,
        arguments: request.params.arguments,
        // The client's trace context (the W3C keys of the request's `_meta`).
        trace: readTraceContext(request.params._meta),
        // Progress goes on this request's own response stream.
        ...(token !== undefined ? { progress: (p: CallProgress) => c.mcpReq.notify({ method: "notifications/progress", params: { progressToken: token, ...p } }) } : {})
      }
      const project = (result: CallToolResult) => {
        const tool = offeredTools(this.store, scope, gate).find((t) => t.name === request.params.name)
        return server.projectCallToolResult(result as never, tool?.outputSchema as Record<string, unknown> | undefined) as never
      }
      const envelope = c.mcpReq.envelope as Record<string, unknown> | undefined
      // A log level in the request's `_meta`: the called service's log messages go on this request's stream while the call lasts.
      const level = LoggingLevelSchema.safeParse(envelope?.[LOG_LEVEL_META_KEY])
      const service = level.success ? offeredTools(this.store, scope, gate).find((t) => t.name === request.params.name)?.service_name : undefined
      const unhear = level.success && service !== undefined
        ? this.resources.hearLogs(scope, service, level.data, (message) => void c.mcpReq.notify({ method: "notifications/message", params: message }).catch(() => undefined))
        : undefined
      try {
        const turn = inputTurnOf(c)
        // Aborted when the client closes the response stream (the modern era's cancellation).
        if (turn === undefined) return project(await callOverMcp(this.store, scope, gate, { ...call, relay: declinedOnModern("call") }, c.mcpReq.signal))
        // A client that can answer: an upstream's request during the call is answered input_required, in rounds.
        const held = await heldCallOverMcp(this.store, scope, gate, call, caller.owner, turn, c.mcpReq.signal).catch((e: unknown) => {
          throw retryRefused(e)
        })
        return roundResult(held, project)
      } finally {
        unhear?.()
      }
    })
    /**
     * A read or a prompt, whose upstream may ask for input as a tool call's may: held for a client
     * that can answer (its round's `input_required`, taken back by its retry for the same
     * `subject`), declined for any other.
     */
    const withInput = async <A>(c: ServerContext, subject: string, what: string, request: (input: catalog.CatalogInput) => Effect.Effect<A, catalog.CatalogError>): Promise<A> => {
      const turn = inputTurnOf(c)
      if (turn === undefined) return run(request({ relay: declinedOnModern(what) }), c.mcpReq.signal)
      const owner = { scope: ctx().label, owner: caller.owner, subject }
      const held = await heldOverMcp(this.store, catalog.heldCatalogRun(request), owner, turn, c.mcpReq.signal).catch((e: unknown) => {
        throw retryRefused(e)
      })
      return roundResult(held, (exit) => {
        if (Exit.isSuccess(exit)) return exit.value
        throw protocolErrorOf(Cause.squash(exit.cause))
      })
    }
    if (offers.resources) {
      server.setRequestHandler("resources/list", async () => ({ resources: mcpResources(ctx()) }))
      server.setRequestHandler("resources/templates/list", async () => ({ resourceTemplates: mcpResourceTemplates(ctx()) }))
      server.setRequestHandler("resources/read", (request, c) => {
        const uri = request.params.uri
        return withInput(c, `resources/read ${uri}`, "read", (input) => catalog.readResource(ctx(), uri, input)) as never
      })
    }
    if (offers.prompts) {
      server.setRequestHandler("prompts/list", async () => ({ prompts: mcpPrompts(ctx()) }))
      server.setRequestHandler("prompts/get", (request, c) => {
        const { name, arguments: args } = request.params
        return withInput(c, `prompts/get ${name}`, "prompt request", (input) => catalog.getPrompt(ctx(), name, args ?? {}, input)) as never
      })
    }
    if (offers.completions) {
      server.setRequestHandler("completion/complete", (request, c) => run(catalog.complete(ctx(), request.params as never), c.mcpReq.signal) as never)
    }
    return server
  }

  /** Shutdown has begun: refuse new modern requests and end every listen stream (gracefully: its final result). */
  shutdown(): void {
    this.closing = true
    this.listens.close().catch(() => undefined)
  }

  /** Ends everything (calls still in flight are aborted). */
  async close(): Promise<void> {
    this.closing = true
    this.unsubscribeMonitor()
    await Promise.all([this.listens.close(), this.requests.close()].map((p) => p.catch(() => undefined)))
  }
}
