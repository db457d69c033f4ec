/**
 * The store as one MCP server: `/mcp` exposes the store scope's tools and `/for_agent/{id}/mcp`
 * an agent's, over Streamable HTTP, so any MCP client (an IDE, an agent framework, the MCP
 * Inspector) can use them. This file serves the 2025 era's sessions; 2026-07-28 requests on the
 * same URLs, which need none, are answered by modern.ts. Tools keep their callable names (`<service>__<tool>`); only services
 * that are healthy or warning are listed; `notifications/tools/list_changed` goes out when that set
 * changes; calls go through the same operation as HTTP calls, so they are recorded the same way:
 * the call path and the catalog are the `Calls` and `Catalog` services, given to the constructor by
 * the layer that builds the endpoint (src/http/extras.ts), taken once.
 *
 * Sessions are capped (`maxSessions`): at the cap the oldest idle session is closed to make room,
 * and when every session is busy the new one is refused with 429 and Retry-After; one API key holds
 * at most its share (`keyShare`), its own oldest idle session closed first. A session with no
 * request for `idleSeconds` is closed. One timer (unref'd) serves every session's expiry.
 *
 * Resource subscriptions (of the sessions and of modern.ts's listen streams) are made upstream once
 * per (scope, service, URI) and shared; a `per_user` service's once per principal too, on the
 * principal's own connection, so each caller hears only its own updates
 * (docs/per-user-credentials.md, "Resource subscriptions").
 *
 * The legacy SSE transport (`GET /sse` + `POST /messages`, src/http/gateway/sse-endpoint.ts) is a second
 * kind of session in the same map: the same SDK server and handlers (`buildServer`), cap, expiry,
 * list_changed fan-out and shutdown.
 *
 * Every session's server is SDK v2's `Server` (`mcpServer`, face.ts, as the 2026-07-28 face builds
 * it), bound to the 2025 era by the client's initialize. A Streamable HTTP session runs on SDK v2's
 * `NodeStreamableHTTPServerTransport`; an SSE session on SDK 1.x's `SSEServerTransport`, since SDK v2
 * has no SSE server transport. Each transport's module is loaded on the first request that needs
 * it (src/domain/on-demand.ts), not at start: a store that never serves such a session never loads it.
 *
 * A Streamable HTTP session's id is sealed (src/http/gateway/session-seal.ts, docs/sessions.md): a request
 * whose id is not in the map but opens with the store's key rebuilds the session (another replica
 * or an earlier run of this store made it), so clients keep their session across a restart or a
 * load balancer. Every session belongs to the key that opened it: another key's request with its
 * id is answered as an unknown session (404), as is an id this process ended (`ended`).
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import { randomUUID } from "node:crypto"
import type { NodeStreamableHTTPServerTransport } from "@modelcontextprotocol/node"
import {
  isInitializeRequest,
  Server,
  type InitializeRequest,
  type JSONRPCMessage,
  type LoggingLevel,
  type LoggingMessageNotification,
  type ServerContext,
  type Transport
} from "@modelcontextprotocol/server"
import type { SSEServerTransport } from "@modelcontextprotocol/sdk/server/sse.js"
import { scopeLabel, type Scope } from "../../domain/service-definition.js"
import { statusOf } from "../../machines/service.js"
import type { Monitor, MonitorEvent } from "../../monitoring/monitor.js"
import { mcpError, ProtocolError, ProtocolErrorCode } from "../../mcp/protocol-error.js"
import type { ResourceTarget } from "../../runtime/catalog.js"
import { ConnectionHold, principalWords } from "../../runtime/user-credentials.js"
import { CredentialChecks } from "../../runtime/per-user-request.js"
import { CATALOG_REQUEST_TIMEOUT_MS, MAX_URI_LENGTH } from "../../runtime/catalog-limits.js"
import type { CatalogOperations } from "../../runtime/operations.js"
import { isStoreError } from "../../domain/errors.js"
import type { ScopeContext } from "../../runtime/host.js"
import { runToPromise } from "../../runtime/run.js"
import { log } from "../../logging/log.js"
import type { Store } from "../../runtime/store.js"
import { McpRequestError, type CallProgress, type McpConnection, type UpstreamRequestRelay } from "../../mcp/types.js"
import { settledWithin, unlessCancelled } from "../../domain/cancellation.js"
import { onDemand } from "../../domain/on-demand.js"
import type { ToolGate } from "../../domain/tool-filter.js"
import { readTraceContext } from "../../domain/trace-context.js"
import { acceptsEventStream, messagesPath, sessionIdOf, watchRequests } from "./sse-endpoint.js"
import { LogRelay } from "./log-relay.js"
import { callOverMcp, type McpOperations, jsonRpcError, mcpPrompts, mcpResources, mcpResourceTemplates, mcpServer, namesOf, rpcErrorOf, scopeContext, TOO_MANY_CODE, tooManyData } from "./face.js"
import { keyShare } from "../../domain/key-share.js"
import { spaced, type Spaced } from "../../domain/spaced.js"
import { SessionSpans, underSpan } from "./method-spans.js"
import type { ResourceStream } from "./modern.js"
import { listedNames, listedTools, routeSearchCall, type ToolListing } from "./search-mode.js"
import { clientFacts, MAX_SESSION_ID_LENGTH, sealedIdKey, type SealSource, type SessionClaims } from "./session-seal.js"

/**
 * The Streamable HTTP transport (@modelcontextprotocol/node, with Hono's Node adapter, which loads
 * Node's fetch classes) and the legacy SSE one (SDK 1.x: sse-transport.ts), loaded on demand.
 */
const streamableTransport = onDemand(() => import("@modelcontextprotocol/node"))
const sseTransport = onDemand(() => import("./sse-transport.js"))

/** A session of either transport; `kind` tells which. */
type Session = StreamableSession | SseSession
type StreamableSession = SessionState & {
  readonly kind: "streamable"
  readonly transport: NodeStreamableHTTPServerTransport
  /** Settles once the server is connected (and, for a rebuilt session, initialized again). */
  ready: Promise<void>
}
/**
 * A legacy SSE session: it lives as long as its GET stream, which the cap never cuts (it is busy
 * for `makeRoom`); its requests arrive by POST and are answered on the stream, so `busy` counts
 * those in flight, and a session with none for `idleSeconds` is closed, its stream ended.
 */
type SseSession = SessionState & {
  readonly kind: "sse"
  readonly transport: SSEServerTransport
  /** Its event stream: what waits there unread bounds the requests it takes (`postMessage`). */
  readonly stream: ServerResponse
}

/**
 * A legacy SSE session's requests in flight at most (each answered later on its stream, the POST at
 * once), and the bytes its stream may hold unread: past either a request is refused 429, so a
 * client that posts without reading its stream cannot make the store hold answer after answer.
 */
const MAX_SSE_REQUESTS_IN_FLIGHT = 64
const MAX_SSE_UNREAD_BYTES = 16 * 1024 * 1024

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
  /** Search mode (search-mode.ts), as the request that opened the session asked; undefined: the whole list. */
  readonly listing: ToolListing | undefined
  /** Who opened it (`sessionOwner`, src/http/gateway/session-seal.ts): only the same key may use it. */
  readonly owner: string
  /** Names of the tools last announced, to tell whether the set changed. */
  listed: string
  /** What the session was told at initialize it may ask beyond tools (fixed for the session's life). */
  readonly offers: ReturnType<CatalogOperations["scopeCapabilities"]>
  /** The resource and prompt lists last announced (`catalogFingerprint` of the `Catalog` service). */
  catalogListed: { readonly resources: string; readonly prompts: string }
  /** Resource subscriptions of the session: key (`subscriptionKey`) -> the URI as the client gave it. */
  readonly subscriptions: Map<string, string>
  /** The level the session asked for with logging/setLevel (src/http/gateway/log-relay.ts); none: every level. */
  logLevel: LoggingLevel | undefined
  /**
   * Ids of the session's requests that failed as "resource not found" and whose answer is not sent
   * yet: the SDK writes every error code -32002 as -32602 (the 2026-07-28 rule) on a 2025 session
   * too, and `restoreNotFound` gives these answers back the 2025 revisions' -32002.
   */
  readonly notFound: Set<string | number>
  /** The spans of the session's requests (tracing on only: method-spans.ts). */
  readonly spans: SessionSpans | undefined
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
  /** The key of the sealed session ids (src/http/gateway/session-seal.ts). */
  readonly seal: SealSource
}

/** Oldest sealed id rebuilt (from its issue time): a day, or the idle limit when that is longer. */
export const sessionMaxAgeMs = (idleSeconds: number): number => Math.max(86_400, idleSeconds) * 1000

/** Ids of sessions this process ended (their digests), remembered so that they are not rebuilt. */
export const MAX_ENDED_SESSIONS = 50_000

/** A sealed id issued this far in the future (another replica's clock) is still accepted. */
const CLOCK_SKEW_MS = 5 * 60_000

/** Resource subscriptions one session may hold. */
export const MAX_SUBSCRIPTIONS_PER_SESSION = 100

/**
 * One upstream subscription (scope, service, original URI), shared by every session that asked for
 * it; of a `per_user` service, one per (scope, service, principal, URI), on that principal's own
 * connection, shared by that principal's sessions and listen streams only.
 */
interface Subscription {
  /** Its key in the gateway's map (`subscriptionKey`). */
  readonly key: string
  readonly scope: Scope
  readonly service: string
  readonly uri: string
  /** A `per_user` service's: the principal (owner digest) whose own connection carries it; undefined: the shared connection's. */
  readonly principal: string | undefined
  /** Session id -> the URI the session subscribed with (what its updates name). */
  readonly sessions: Map<string, string>
  /** The connection subscribed on (a reconnection subscribes again on the new one). */
  connection: McpConnection | undefined
  /** A principal's: its hold on the principal's pooled connection, from the moment it is being made (src/runtime/user-credentials.ts). */
  hold: ConnectionHold | undefined
  /** A principal's: the service's definition it was made under (a redefined service: made again). */
  definition: unknown
  /**
   * A principal's: its latest making (`makePrincipal`: the first, or made again), for the subscribers
   * that join: settles as that making ends, or as the one that took its place does; rejects with
   * the failure that dropped it or left it waiting for its service.
   */
  made: Promise<void> | undefined
  /** A principal's, while it is being made (or made again): aborts that making (its upstream subscribe, the pooled connection it uses) when the subscription is detached meanwhile. */
  making: AbortController | undefined
  /** A principal's: when it was last made again (performance.now(), the latest MAX_RENEWALS), so that a connection that keeps closing does not make it forever. */
  readonly renewals: Array<number>
  /** Its updates, relayed spaced by `UPDATE_EVERY_MS` (`relayUpdate`). */
  readonly updates: Spaced
}

/**
 * Updates of one subscription are relayed at most once in this many ms; those that come meanwhile
 * are one update at the end of it (each only says "read it again"): an upstream that floods
 * `notifications/resources/updated` cannot make the store write without bound to its sessions.
 */
const UPDATE_EVERY_MS = 250

/** How long an upstream unsubscribe may take (ms). */
const UNSUBSCRIBE_TIMEOUT_MS = 10_000

/** A principal's subscription is made again at most this many times in RENEWAL_WINDOW_MS; once more, it is dropped. */
const MAX_RENEWALS = 5
const RENEWAL_WINDOW_MS = 60_000

/**
 * A subscription's key: the shared one's (scope, service, URI), a principal's with the principal's
 * digest too. The URI, the one free text, comes last: no URI makes another principal's key.
 */
const subscriptionKey = (scope: Scope, service: string, uri: string, principal: string | undefined): string =>
  `${scopeLabel(scope)}\n${service}\n${principal ?? ""}\n${uri}`

/** The 2025 revisions' code of "resource not found" (the 2026-07-28 one says -32602). */
const RESOURCE_NOT_FOUND = -32002

/**
 * Gives the answers of a session's requests noted in `notFound` the code -32002 back: the SDK's
 * encoding (SDK v2, every revision) writes -32602 for it, which a 2025 client does not know as "not
 * found". Set on the transport's `send`, which the SDK server calls for every answer.
 */
const restoreNotFound = (transport: Pick<Transport, "send">, notFound: Set<string | number>): void => {
  const send = transport.send.bind(transport)
  transport.send = (message, options) => {
    if (notFound.size > 0 && "error" in message && message.error.code === -32602 && message.id !== undefined && message.id !== null && notFound.delete(message.id)) {
      return send({ ...message, error: { ...message.error, code: RESOURCE_NOT_FOUND } }, options)
    }
    return send(message, options)
  }
}

/** A store error as the MCP error a 2025 client understands (`rpcErrorOf`; resource not found is -32002, as the 2025 revisions say). */
const mcpErrorOf = (e: unknown): unknown => {
  if (!isStoreError(e)) return e
  if (e._tag === "ResourceNotFound") return mcpError(RESOURCE_NOT_FOUND, e.message, { uri: e.uri })
  const { code, message, data } = rpcErrorOf(e)
  return mcpError(code, message, data)
}

/**
 * The relay of a session's request that may need input (`what`: a tool call, a resource read, a
 * prompt request): the upstream's elicitation and sampling go to this client, on the request's own
 * stream, when it declared the capability at initialize; otherwise declined, saying why.
 */
const sessionRelay =
  (server: Server, ctx: ServerContext, what: string): UpstreamRequestRelay =>
  (req, { signal, timeoutMs }) => {
    const capability = req.method === "elicitation/create" ? "elicitation" : "sampling"
    if (server.getClientCapabilities()?.[capability] === undefined) {
      return Promise.reject(mcpError(ProtocolErrorCode.InvalidRequest, `mcp-store declined ${req.method}: the MCP client that made this ${what} did not declare the ${capability} capability`))
    }
    // The SDK checks the answer against the method's result schema.
    return ctx.mcpReq.send(req as never, { signal, timeout: timeoutMs }) as Promise<Record<string, unknown>>
  }

/** Seconds a client refused at the session cap is asked to wait (Retry-After). */
export const MCP_RETRY_AFTER_SECONDS = 5

// Node timers fire at once for delays above 2^31-1 ms.
const MAX_TIMER_MS = 2_147_483_647

/** Whether a POST body (one message or a batch) holds an `initialize` request. */
const initializes = (body: unknown): boolean => (Array.isArray(body) ? body.some((m) => isInitializeRequest(m)) : isInitializeRequest(body))

/** The params of the (first) initialize request of a body that `initializes`. */
const initializeParams = (body: unknown): InitializeRequest["params"] =>
  ((Array.isArray(body) ? body.find((m) => isInitializeRequest(m)) : body) as InitializeRequest).params

/** A session id as a log line shows it: enough to tell two apart (8 characters of its IV), never the whole sealed id. */
const shortId = (id: string): string => (id.length > 16 ? `${id.slice(0, 3)}…${sealedIdKey(id).slice(0, 8)}` : id)

/**
 * Marks a new transport as initialized with session `id`, as its own initialize would have: the
 * one reach into the SDK's private state (@modelcontextprotocol/node 2.4, as SDK 1.x before it: the
 * Node transport wraps a web-standard one whose `_initialized` and `sessionId` `validateSession`
 * checks; the SDK has no public way to start a transport on a known session).
 * test/extras/mcp-sessions.test.ts fails if the SDK changes them.
 */
export const markInitialized = (transport: NodeStreamableHTTPServerTransport, id: string): void => {
  const inner = (transport as unknown as { _webStandardTransport?: { sessionId?: string; _initialized?: unknown } })._webStandardTransport
  if (inner === undefined || inner._initialized !== false || inner.sessionId !== undefined) {
    throw new Error("@modelcontextprotocol/node changed: NodeStreamableHTTPServerTransport has no _webStandardTransport._initialized (src/http/gateway/endpoint.ts, markInitialized)")
  }
  inner.sessionId = id
  inner._initialized = true
}

/** 429 for a session that does not fit under `max` (the cap, or a key's share), with Retry-After and the contract's TOO_MANY. */
const tooManySessions = (res: ServerResponse, message: string, max: number) =>
  jsonRpcError(res, 429, TOO_MANY_CODE, message, {
    headers: { "retry-after": String(MCP_RETRY_AFTER_SECONDS) },
    data: tooManyData({ limit: "max_mcp_sessions", max, retryAfterSeconds: MCP_RETRY_AFTER_SECONDS })
  })

/**
 * The MCP endpoint's sessions, for every scope. Owned by the HTTP server; `close()` ends them.
 * The session map is kept in order of last activity (a session is moved to the end when a request
 * begins or ends), so the oldest idle session is the first idle one in it.
 */
export class McpGateway {
  private readonly sessions = new Map<string, Session>()
  /** The sealed ids of sessions this process ended (`sealedIdKey`) -> when the id expires anyway (ms); oldest first. */
  private readonly ended = new Map<string, number>()
  private readonly unsubscribeMonitor: () => void
  private readonly idleMs: number
  private sweepTimer: NodeJS.Timeout | undefined
  private sweepAt = Number.POSITIVE_INFINITY
  private shuttingDown = false
  /** Upstream resource subscriptions by key. */
  private readonly subscriptions = new Map<string, Subscription>()
  /** The subscriptions made on each connection (`place`), and the connection's update listener, there while any is. */
  private readonly onConnection = new Map<McpConnection, { readonly subs: Set<Subscription>; readonly off: () => void }>()
  /**
   * The upstream unsubscribes in flight, by subscription key: a subscribe of the same key is sent
   * once they ended (on Streamable HTTP two requests may be handled in either order, and an
   * unsubscribe handled last would leave the new subscription deaf).
   */
  private readonly unsubscribing = new Map<string, { done: Promise<void>; queued: boolean }>()
  /** Subscribers beside the sessions: 2026-07-28 listen streams (modern.ts), by id -> how each hears an update. */
  private readonly streamSubscribers = new Map<string, (uri: string) => void>()
  /** Upstream log messages to the sessions, and the upstreams' level (docs/logging.md). */
  private readonly logs = new LogRelay((scope) => [...this.sessions.values()].filter((s) => scopeLabel(s.scope) === scope))

  /**
   * `ops`: the call path and the catalog (the `Calls` and `Catalog` services), taken once by the
   * layer that builds the endpoint (src/http/extras.ts).
   */
  constructor(
    private readonly store: Store,
    monitor: Monitor,
    private readonly ops: McpOperations,
    private readonly options: McpGatewayOptions
  ) {
    this.idleMs = options.idleSeconds * 1000
    this.unsubscribeMonitor = monitor.subscribe((e) => this.onMonitorEvent(e))
  }

  private toolNames(scope: Scope, gate: ToolGate | undefined, listing: ToolListing | undefined): string {
    return listedNames(this.store, scope, gate, listing)
  }

  private scopeContext(scope: Scope): ScopeContext {
    return scopeContext(this.store, scope)
  }

  private onMonitorEvent(e: MonitorEvent): void {
    if (e.type === "status" || e.type === "catalog_changed") this.onCatalogEvent(e.scope, e.service_name)
    if (e.type === "status") this.watchLogs(e.scope, e.service_name)
    if (e.type === "removed") {
      this.logs.unwatch(e.scope, e.service_name)
      // Seen as the store's root receives the event, before the service leaves the scope's actors.
      if (!this.shuttingDown) setImmediate(() => this.announce(e.scope))
      return
    }
    if (e.type !== "status" && e.type !== "tools_changed") return
    this.announce(e.scope)
  }

  /** Sends list_changed to the sessions of a scope (a label) whose tool list is no longer the one they last got. */
  private announce(scope: string): void {
    // One tool list per scope, allow-list and listing for the event, however many of its sessions are open.
    const lists = new Map<ToolListing | undefined, Map<ToolGate | undefined, string>>()
    for (const session of this.sessions.values()) {
      if (scopeLabel(session.scope) !== scope) continue
      let byGate = lists.get(session.listing)
      if (byGate === undefined) lists.set(session.listing, (byGate = new Map()))
      let names = byGate.get(session.gate)
      if (names === undefined) byGate.set(session.gate, (names = this.toolNames(session.scope, session.gate, session.listing)))
      if (names === session.listed) continue
      session.listed = names
      session.server.sendToolListChanged().catch(() => undefined)
    }
  }

  /**
   * The scope's resource or prompt list may have changed: tell each of its sessions that was offered
   * them and whose list differs from the one it was last told; subscribe again on a new connection.
   */
  private onCatalogEvent(scopeLabelOfEvent: string, serviceName: string): void {
    let lists: ReturnType<CatalogOperations["catalogFingerprint"]> | undefined
    for (const session of this.sessions.values()) {
      if (scopeLabel(session.scope) !== scopeLabelOfEvent) continue
      if (!session.offers.resources && !session.offers.prompts) continue
      lists ??= this.ops.catalog.catalogFingerprint(this.scopeContext(session.scope))
      if (session.offers.resources && lists.resources !== session.catalogListed.resources) session.server.sendResourceListChanged().catch(() => undefined)
      if (session.offers.prompts && lists.prompts !== session.catalogListed.prompts) session.server.sendPromptListChanged().catch(() => undefined)
      session.catalogListed = lists
    }
    for (const sub of this.subscriptions.values()) {
      if (scopeLabel(sub.scope) !== scopeLabelOfEvent || sub.service !== serviceName) continue
      if (sub.principal === undefined) void this.subscribeUpstream(sub)
      else this.renewPrincipal(sub)
    }
  }

  /** Listens to the log messages of a service's current connection, while some session of its scope is open. */
  private watchLogs(label: string, service: string): void {
    for (const session of this.sessions.values()) {
      if (scopeLabel(session.scope) !== label) continue
      const actor = this.scopeContext(session.scope).findService(service)
      const snapshot = actor?.getSnapshot()
      const connected = snapshot !== undefined && (statusOf(snapshot) === "healthy" || statusOf(snapshot) === "warning")
      this.logs.watch(label, service, connected ? snapshot.context.connection : undefined)
      return
    }
  }

  /**
   * Serves resources, resource templates, prompts and completion to a session, for what its scope's
   * services offer (`offers`, fixed at initialize). Any transport's session may use it.
   */
  private serveCatalog(server: Server, session: Pick<Session, "id" | "scope" | "offers" | "catalogListed" | "subscriptions" | "notFound" | "spans" | "owner">): void {
    const { scope, offers } = session
    const ctx = () => this.scopeContext(scope)
    /** A failure as the session's MCP error; a "resource not found" is noted for `restoreNotFound`. */
    const failed = (c: ServerContext, e: unknown): never => {
      const error = mcpErrorOf(e)
      if (error instanceof ProtocolError && error.code === RESOURCE_NOT_FOUND) session.notFound.add(c.mcpReq.id)
      throw error
    }
    // Tracing on: the request's span (method-spans.ts) is the parent of its upstream request's.
    const run = <A>(effect: Parameters<typeof runToPromise<A, unknown>>[0], c: ServerContext) =>
      runToPromise(session.spans === undefined ? effect : underSpan(effect, session.spans.spanOf(c.mcpReq.id)), c.mcpReq.signal).catch((e: unknown) => failed(c, e))
    if (offers.resources) {
      // The lists are read from the actors' snapshots (no upstream request): nothing to fail but a bug.
      server.setRequestHandler("resources/list", async () => {
        session.catalogListed = this.ops.catalog.catalogFingerprint(ctx())
        return { resources: mcpResources(this.ops.catalog, ctx()) }
      })
      server.setRequestHandler("resources/templates/list", async () => ({
        resourceTemplates: mcpResourceTemplates(this.ops.catalog, ctx())
      }))
      server.setRequestHandler("resources/read", (request, c) =>
        run(this.ops.catalog.readResource(ctx(), request.params.uri, { relay: sessionRelay(server, c, "read"), owner: session.owner }), c) as never
      )
      if (offers.subscribe) {
        server.setRequestHandler("resources/subscribe", async (request, c) => {
          await this.subscribe(session, request.params.uri).catch((e: unknown) => failed(c, e))
          return {}
        })
        server.setRequestHandler("resources/unsubscribe", async (request) => {
          this.unsubscribe(session, request.params.uri)
          return {}
        })
      }
    }
    if (offers.prompts) {
      server.setRequestHandler("prompts/list", async () => {
        session.catalogListed = this.ops.catalog.catalogFingerprint(ctx())
        return { prompts: mcpPrompts(this.ops.catalog, ctx()) }
      })
      server.setRequestHandler("prompts/get", (request, c) =>
        run(this.ops.catalog.getPrompt(ctx(), request.params.name, request.params.arguments ?? {}, { relay: sessionRelay(server, c, "prompt request"), owner: session.owner }), c) as never
      )
    }
    if (offers.completions) {
      server.setRequestHandler("completion/complete", (request, c) => run(this.ops.catalog.complete(ctx(), request.params as never, session.owner), c) as never)
    }
  }

  /**
   * Subscribes a session to a resource: one upstream subscription per (scope, service, URI),
   * shared; of a `per_user` service, one per principal too, made on the principal's own
   * connection, and refused (CREDENTIALS_REQUIRED, as a read) to a caller without a credential.
   */
  private async subscribe(session: Pick<Session, "id" | "scope" | "subscriptions" | "owner">, uri: string): Promise<void> {
    await this.join(session, uri).made.catch((e: unknown) => {
      throw mcpErrorOf(e)
    })
  }

  /**
   * Puts a session or a listen stream on the subscription of `uri` (`subscribe`), making it when it
   * is the first: `made` settles as the upstream subscribe ends (rejecting, with the store's error
   * or an MCP one, as the client's subscribe is refused), `perUser` tells a principal's. A
   * principal's subscription being made (again) is answered as that making ends; one waiting for
   * its service refuses the newcomer with that failure (the others stay on it). `recorded`: false
   * when the subscriber was on that subscription already (another form of the URI, prefixed or
   * not: its updates name the form given first). Throws the MCP error of a URI that cannot be
   * subscribed (too long, unknown, past the cap). `checks`: a listen's credential checks, shared by
   * its URIs.
   */
  private join(
    session: Pick<Session, "id" | "scope" | "subscriptions" | "owner">,
    uri: string,
    checks?: CredentialChecks | undefined
  ): { readonly perUser: boolean; readonly recorded: boolean; readonly made: Promise<void> } {
    let target: ResourceTarget
    try {
      if (uri.length > MAX_URI_LENGTH) throw mcpError(ProtocolErrorCode.InvalidParams, `uri is longer than ${MAX_URI_LENGTH} characters`)
      target = this.ops.catalog.resolveResource(this.scopeContext(session.scope), uri)
    } catch (e) {
      throw mcpErrorOf(e)
    }
    const service = target.actor.getSnapshot().context.name
    const principal = this.ops.catalog.isPerUser(target.actor) ? session.owner : undefined
    const key = subscriptionKey(session.scope, service, target.uri, principal)
    const perUser = principal !== undefined
    // A principal's subscriber refused (its subscription waits for its service, or its making, first
    // or again, failed) leaves it, whichever way it joined; one dropped has none left.
    const leavesIfRefused = (made: Promise<void>): Promise<void> => {
      const joined = this.subscriptions.get(key)
      const given = session.subscriptions.get(key)
      made.catch(() => {
        if (joined === undefined || this.subscriptions.get(key) !== joined || session.subscriptions.get(key) !== given) return
        session.subscriptions.delete(key)
        this.dropSubscriber(key, session.id)
      })
      return made
    }
    if (session.subscriptions.has(key)) {
      const made = this.subscriptions.get(key)?.made ?? Promise.resolve()
      return { perUser, recorded: false, made: perUser ? leavesIfRefused(made) : made }
    }
    if (session.subscriptions.size >= MAX_SUBSCRIPTIONS_PER_SESSION) {
      throw mcpError(ProtocolErrorCode.InvalidRequest, `a session may hold at most ${MAX_SUBSCRIPTIONS_PER_SESSION} resource subscriptions`)
    }
    let sub = this.subscriptions.get(key)
    const fresh = sub === undefined
    if (sub === undefined) {
      const created: Subscription = {
        key,
        scope: session.scope,
        service,
        uri: target.uri,
        principal,
        sessions: new Map(),
        connection: undefined,
        hold: undefined,
        definition: undefined,
        made: undefined,
        making: undefined,
        renewals: [],
        updates: spaced(UPDATE_EVERY_MS, () => this.sendUpdate(created))
      }
      sub = created
      this.subscriptions.set(key, sub)
    }
    sub.sessions.set(session.id, uri)
    session.subscriptions.set(key, uri)
    if (principal === undefined) {
      // The first subscribe upstream is every joiner's until it ends: a refused one takes the
      // subscription away from all of them (each told so), so that a retry subscribes again.
      if (fresh) sub.made = this.firstSubscribe(sub)
      return { perUser, recorded: true, made: sub.made ?? Promise.resolve() }
    }
    if (fresh) return { perUser, recorded: true, made: leavesIfRefused(this.makePrincipal(sub, true, checks)) }
    // The same principal's subscription, made or being made (again): answered as its latest making ends.
    return { perUser, recorded: true, made: leavesIfRefused(sub.made ?? Promise.resolve()) }
  }

  /** A 2026-07-28 request hears a service's log messages while its call lasts (LogRelay.hear). */
  hearLogs(scope: Scope, service: string, level: LoggingLevel, send: (message: LoggingMessageNotification["params"]) => void): () => void {
    const label = scopeLabel(scope)
    // Listened to while a request hears it, as while a session of the scope is open.
    const snapshot = this.scopeContext(scope).findService(service)?.getSnapshot()
    if (snapshot !== undefined && (statusOf(snapshot) === "healthy" || statusOf(snapshot) === "warning")) this.logs.watch(label, service, snapshot.context.connection)
    return this.logs.hear(label, service, level, send)
  }

  /**
   * Subscribes a 2026-07-28 listen stream (not a session) of `owner` to resources of a scope, before
   * the stream opens, sharing the upstream subscriptions with the sessions (a `per_user` service's:
   * with the same principal's) and their cap (MAX_SUBSCRIPTIONS_PER_SESSION). A URI that cannot be
   * subscribed at all (too long, unknown, past the cap) is logged and left out of `subscribed`, so
   * the stream's acknowledged filter does not name it. A `per_user` service's subscribe that is
   * refused (no credential: CredentialsRequired; its connections all in use or held: TooMany; not
   * usable now: ServiceUnavailable; the upstream's refusal) rejects with that error, the first
   * refusal at once (the others' subscribes not waited for), every subscription made dropped, and
   * the listen is refused with it: the client is never told it is subscribed when it is not. Two
   * forms of one URI (prefixed and not) are one subscription, in `subscribed` once, as named first. The caller's credential is checked once per service however many of
   * its URIs are named (one read, one refusal line). Only the `per_user` subscribes are waited for;
   * a shared service's goes on behind the open stream (a failure is a log line; the URI stays in the
   * acknowledged filter: it was being subscribed), and the wait ends, every subscription dropped (a
   * principal's still being made cancelled upstream), when `signal` aborts (the client went away,
   * also before this began): rejects with `signal.reason` then.
   */
  async subscribeStream(scope: Scope, owner: string, uris: ReadonlyArray<string>, signal: AbortSignal): Promise<ResourceStream> {
    // The client gone already: nothing is subscribed for it.
    if (signal.aborted) throw signal.reason
    const subscriber = { id: `listen/${randomUUID()}`, scope, owner, subscriptions: new Map<string, string>() }
    let onUpdate: ((uri: string) => void) | undefined
    this.streamSubscribers.set(subscriber.id, (uri) => onUpdate?.(uri))
    const close = () => {
      onUpdate = undefined
      // A subscription still being made is already in the map: it is dropped with the rest.
      for (const key of subscriber.subscriptions.keys()) this.dropSubscriber(key, subscriber.id)
      subscriber.subscriptions.clear()
      this.streamSubscribers.delete(subscriber.id)
    }
    // No more than the cap is even tried: a listen naming thousands of URIs costs a hundred subscribes and one line.
    const wanted = [...new Set(uris)]
    const tried = wanted.slice(0, MAX_SUBSCRIPTIONS_PER_SESSION)
    if (wanted.length > tried.length) {
      log.info(`${scopeLabel(scope)} subscriptions/listen: ${wanted.length - tried.length} resource URIs past the cap of ${MAX_SUBSCRIPTIONS_PER_SESSION} not subscribed`, { event: "subscribe_failed" })
    }
    const notSubscribed = (uri: string, e: unknown) => {
      const message = e instanceof Error ? e.message : String(e)
      log.info(`${scopeLabel(scope)} subscriptions/listen: ${JSON.stringify(uri.slice(0, 200))} not subscribed: ${message}`, { event: "subscribe_failed" })
      return undefined
    }
    const checks = new CredentialChecks()
    // Each principal's subscribe: the first refusal ends the wait.
    const waited: Array<Promise<void>> = []
    const subscribed: Array<string> = []
    for (const uri of tried) {
      let joined: ReturnType<McpGateway["join"]>
      try {
        joined = this.join(subscriber, uri, checks)
      } catch (e) {
        notSubscribed(uri, e)
        continue
      }
      // Another form of a URI already named (one subscription): the updates name the first, the filter only it.
      if (!joined.recorded) continue
      subscribed.push(uri)
      if (joined.perUser) waited.push(joined.made)
      else joined.made.catch((e: unknown) => notSubscribed(uri, e))
    }
    let made: Array<void> | undefined
    try {
      made = await unlessCancelled(Promise.all(waited), signal, async () => undefined)
    } catch (refused) {
      close()
      throw refused
    }
    if (made === undefined) {
      close()
      throw signal.reason
    }
    return { subscribed, deliverTo: (f) => void (onUpdate = f), close }
  }

  private unsubscribe(session: Pick<Session, "id" | "scope" | "subscriptions">, uri: string): void {
    for (const [key, given] of session.subscriptions) {
      if (given !== uri) continue
      session.subscriptions.delete(key)
      this.dropSubscriber(key, session.id)
    }
  }

  private dropSubscriber(key: string, sessionId: string): void {
    const sub = this.subscriptions.get(key)
    if (sub === undefined) return
    sub.sessions.delete(sessionId)
    if (sub.sessions.size > 0) return
    this.subscriptions.delete(key)
    this.detach(sub, true)
  }

  /**
   * Takes a subscription off its connection (unsubscribed there upstream when `unsubscribe`), and
   * a principal's connection is no longer held for it (idle from now on, unless something else holds it).
   */
  private detach(sub: Subscription, unsubscribe: boolean): void {
    sub.updates.stop()
    // Still being made: its upstream subscribe is cancelled, and the principal's connection is no longer busy with it.
    const making = sub.making
    sub.making = undefined
    making?.abort()
    const connection = sub.connection
    this.place(sub, undefined)
    if (unsubscribe && connection !== undefined) this.sendUnsubscribe(sub.key, connection, sub.uri)
    const hold = sub.hold
    sub.hold = undefined
    hold?.release()
  }

  /** Moves a subscription onto `connection`, or off any: a connection's update listener is there while a subscription is. */
  private place(sub: Subscription, connection: McpConnection | undefined): void {
    const previous = sub.connection
    if (previous === connection) return
    sub.connection = connection
    const before = previous === undefined ? undefined : this.onConnection.get(previous)
    if (previous !== undefined && before !== undefined && before.subs.delete(sub) && before.subs.size === 0) {
      this.onConnection.delete(previous)
      before.off()
    }
    if (connection === undefined) return
    const now = this.onConnection.get(connection)
    if (now !== undefined) now.subs.add(sub)
    else this.onConnection.set(connection, { subs: new Set([sub]), off: connection.onResourceUpdated((uri) => this.relayUpdate(connection, uri)) })
  }

  /**
   * Drops a subscription with every session and stream on it (a principal's that cannot be made,
   * or made again); `why`: its log line. A session may subscribe again.
   */
  private discard(sub: Subscription, why?: string): void {
    if (this.subscriptions.get(sub.key) === sub) this.subscriptions.delete(sub.key)
    for (const id of sub.sessions.keys()) this.sessions.get(id)?.subscriptions.delete(sub.key)
    sub.sessions.clear()
    this.detach(sub, false)
    if (why !== undefined) {
      log.warn(`${scopeLabel(sub.scope)}/${sub.service} resources/subscribe ${JSON.stringify(sub.uri.slice(0, 200))} of principal ${principalWords(sub.principal ?? "")} dropped: ${why}`, {
        event: "subscription_dropped",
        scope: scopeLabel(sub.scope),
        service: sub.service
      })
    }
  }

  /**
   * Makes a principal's subscription (`subscribeAsPrincipal`), or makes it again, this making its
   * `made` from now on: it settles as this making ends, or, when another took its place meanwhile
   * (its connection closed under it), as that one does. Made again (not `strict`), its failure
   * is a log line and refuses only the subscribers that joined meanwhile.
   */
  private makePrincipal(sub: Subscription, strict: boolean, checks?: CredentialChecks | undefined): Promise<void> {
    const made: Promise<void> = this.subscribeAsPrincipal(sub, strict, checks).then(() => (sub.made !== made && sub.made !== undefined ? sub.made : undefined))
    sub.made = made
    if (!strict) made.catch(() => undefined)
    return made
  }

  /**
   * Makes a principal's subscription on its own connection (`subscribeAsPrincipal` of the catalog:
   * the caller's credential read, the connection opened or taken from the pool and held). A failure
   * rejects with it; `strict` (a client's subscribe): it drops the subscription (each face maps it as
   * a read's); else (made again) it drops it with a log line, or leaves it waiting for its service.
   */
  private async subscribeAsPrincipal(sub: Subscription, strict: boolean, checks?: CredentialChecks | undefined): Promise<void> {
    const ctx = this.scopeContext(sub.scope)
    const actor = ctx.findService(sub.service)
    // Dropped after the subscribe succeeded but before this making heard of it: unsubscribed there.
    const hold = new ConnectionHold(
      (why, again) => this.principalConnectionClosed(sub, hold, why, again),
      (connection) => this.unsubscribeUnused(sub, connection)
    )
    sub.hold = hold
    let connection: McpConnection
    try {
      if (actor === undefined) throw mcpError(ProtocolErrorCode.InvalidParams, `the service '${sub.service}' is gone`)
      sub.definition = actor.getSnapshot().context.definition
      const making = new AbortController()
      sub.making = making
      await this.afterUnsubscribes(sub.key, making.signal)
      connection = await runToPromise(this.ops.catalog.subscribeAsPrincipal(ctx, { actor, uri: sub.uri }, sub.principal, hold, checks), making.signal).finally(() => {
        if (sub.making === making) sub.making = undefined
      })
    } catch (e) {
      hold.release()
      if (sub.hold !== hold) return
      sub.hold = undefined
      if (strict) {
        this.discard(sub)
        throw e
      }
      const why = e instanceof Error ? e.message : String(e)
      // The service is not connected (reconnecting, redefined): made again once it is (`renewPrincipal`).
      if (isStoreError(e) && e._tag === "ServiceUnavailable" && this.subscriptions.get(sub.key) === sub) {
        log.info(`${scopeLabel(sub.scope)}/${sub.service} resources/subscribe ${JSON.stringify(sub.uri.slice(0, 200))} of principal ${principalWords(sub.principal ?? "")} waits for its service: ${why}`, {
          event: "subscription_waiting",
          scope: scopeLabel(sub.scope),
          service: sub.service
        })
        throw e
      }
      this.discard(sub, `it could not be made again: ${why}`)
      throw e
    }
    // The last subscriber left meanwhile, or its connection closed under it (made again since): undone here.
    if (this.subscriptions.get(sub.key) !== sub || sub.hold !== hold) {
      hold.release()
      this.unsubscribeUnused(sub, connection)
      return
    }
    this.place(sub, connection)
  }

  /**
   * A principal's connection closed under its subscription (a held connection is never closed for
   * idleness nor to make room: its credential or OAuth authorization changed or was deleted, here or
   * on another replica; it broke or closed by itself, a local process that exited; its service was
   * redefined or deleted; the store stops):
   * the listener of the dead connection goes, and the subscription is made again on a new
   * connection (`again`), or dropped with a log line.
   */
  private principalConnectionClosed(sub: Subscription, hold: ConnectionHold, why: string, again: boolean): void {
    if (sub.hold !== hold) return
    // The hold is over already (its connection closed): nothing to release, nothing to unsubscribe.
    this.detach(sub, false)
    if (this.subscriptions.get(sub.key) !== sub) return
    if (!again || this.shuttingDown) return this.discard(sub, `the principal's connection was closed (${why})`)
    const now = performance.now()
    if (sub.renewals.length >= MAX_RENEWALS && now - sub.renewals[0]! < RENEWAL_WINDOW_MS) {
      return this.discard(sub, `the principal's connection was closed (${why}), the ${MAX_RENEWALS + 1}th time within ${RENEWAL_WINDOW_MS / 1000} s`)
    }
    sub.renewals.push(now)
    if (sub.renewals.length > MAX_RENEWALS) sub.renewals.shift()
    log.info(`${scopeLabel(sub.scope)}/${sub.service} resources/subscribe ${JSON.stringify(sub.uri.slice(0, 200))} of principal ${principalWords(sub.principal ?? "")} made again: its connection was closed (${why})`, {
      event: "subscription_renewed",
      scope: scopeLabel(sub.scope),
      service: sub.service
    })
    void this.makePrincipal(sub, false)
  }

  /**
   * A principal's subscription as its service's status or catalog changes: once the service is
   * connected, one waiting for it is made, and one made under an earlier definition (the service was
   * redefined) is made again (the pool closes the old connection at its next use).
   */
  private renewPrincipal(sub: Subscription): void {
    const snapshot = this.scopeContext(sub.scope).findService(sub.service)?.getSnapshot()
    // The service gone (the pool closes its connections: the subscription is dropped), not connected, or it is being made.
    if (snapshot === undefined || (statusOf(snapshot) !== "healthy" && statusOf(snapshot) !== "warning")) return
    if (sub.hold !== undefined && sub.connection === undefined) return
    if (sub.connection !== undefined) {
      if (snapshot.context.definition === sub.definition) return
      this.detach(sub, true)
    }
    void this.makePrincipal(sub, false)
  }

  /** Unsubscribes `uri` on `connection` unless a subscription is made there for it. */
  private unsubscribeUnused(sub: Subscription, connection: McpConnection): void {
    if (this.subscribedOn(connection, sub.uri)) return
    // Its key being made (again) now: that making subscribes, on this connection or another; an
    // unsubscribe sent meanwhile could be handled after its subscribe.
    const making = this.subscriptions.get(sub.key)?.making
    if (making !== undefined && !making.signal.aborted) return
    this.sendUnsubscribe(sub.key, connection, sub.uri)
  }

  /** Whether a subscription of `uri` is made on `connection`. */
  private subscribedOn(connection: McpConnection, uri: string): boolean {
    for (const sub of this.onConnection.get(connection)?.subs ?? []) if (sub.uri === uri) return true
    return false
  }

  /**
   * Unsubscribes `uri` upstream on `connection`, after the unsubscribe of `key` in flight
   * (`unsubscribing`), unless a subscription of that URI is on the connection again by then. At
   * most one waits behind the one in flight: a client subscribing and unsubscribing in a loop queues
   * nothing more (the one waiting unsubscribes for it; on another connection, left to its idle end).
   */
  private sendUnsubscribe(key: string, connection: McpConnection, uri: string): void {
    const previous = this.unsubscribing.get(key)
    if (previous?.queued === true) return
    const entry = { done: Promise.resolve(), queued: previous !== undefined }
    entry.done = (previous?.done ?? Promise.resolve())
      .then(() => {
        entry.queued = false
        return this.subscribedOn(connection, uri) ? undefined : connection.unsubscribeResource(uri, { timeoutMs: UNSUBSCRIBE_TIMEOUT_MS })
      })
      .then(
        () => undefined,
        () => undefined
      )
      .finally(() => {
        if (this.unsubscribing.get(key) === entry) this.unsubscribing.delete(key)
      })
    this.unsubscribing.set(key, entry)
  }

  /** Until the unsubscribes of `key` in flight have ended, at most their own time-out, or `signal` aborts. */
  private async afterUnsubscribes(key: string, signal?: AbortSignal): Promise<void> {
    const pending = this.unsubscribing.get(key)
    if (pending !== undefined) await settledWithin(pending.done, 2 * UNSUBSCRIBE_TIMEOUT_MS, signal)
  }

  /**
   * A shared subscription's first subscribe upstream (`subscribeUpstream`, strict). Refused, the
   * subscription is taken off every session and stream on it, and off its connection (nothing was
   * subscribed there); it settles as the subscribe ends.
   */
  private async firstSubscribe(sub: Subscription): Promise<void> {
    try {
      await this.subscribeUpstream(sub, true)
      sub.made = undefined
    } catch (e) {
      if (this.subscriptions.get(sub.key) === sub) {
        this.subscriptions.delete(sub.key)
        for (const id of sub.sessions.keys()) this.sessions.get(id)?.subscriptions.delete(sub.key)
        sub.sessions.clear()
        this.detach(sub, false)
      }
      throw e
    }
  }

  /** Subscribes upstream on the service's current connection, if it is not subscribed there yet. */
  private async subscribeUpstream(sub: Subscription, strict = false): Promise<void> {
    const actor = this.scopeContext(sub.scope).findService(sub.service)
    const connection = actor?.getSnapshot().context.connection
    if (connection === undefined || connection === sub.connection) return
    this.place(sub, connection)
    try {
      await this.afterUnsubscribes(sub.key)
      await connection.subscribeResource(sub.uri, { timeoutMs: CATALOG_REQUEST_TIMEOUT_MS })
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e)
      log.warn(`${scopeLabel(sub.scope)}/${sub.service} resources/subscribe ${JSON.stringify(sub.uri)} failed: ${message}`, { event: "subscribe_failed" })
      // The server's refusal of the URI (invalid params, not found) is the client's to hear as such.
      const code = e instanceof McpRequestError && e.kind === "protocol" && (e.code === ProtocolErrorCode.InvalidParams || e.code === -32002) ? e.code : ProtocolErrorCode.InternalError
      if (strict) throw mcpError(code, message)
    }
  }

  /**
   * An upstream's `notifications/resources/updated`: to every session subscribed to that URI on
   * that connection (a principal's own connection: that principal's sessions and streams only).
   */
  private relayUpdate(connection: McpConnection, uri: string): void {
    for (const sub of this.onConnection.get(connection)?.subs ?? []) if (sub.uri === uri) sub.updates.notify()
  }

  /** Tells a subscription's sessions and streams that its resource changed, each by the URI it gave. */
  private sendUpdate(sub: Subscription): void {
    if (this.subscriptions.get(sub.key) !== sub) return
    for (const [sessionId, given] of sub.sessions) {
      const session = this.sessions.get(sessionId)
      if (session !== undefined) session.server.sendResourceUpdated({ uri: given }).catch(() => undefined)
      else this.streamSubscribers.get(sessionId)?.(given)
    }
  }

  /**
   * A Streamable HTTP session, in the map at once (so concurrent initializations count against the
   * cap): a new one, its id sealed from its initialize request's facts, or one rebuilt from the
   * claims of its sealed id, its transport and server initialized as they were (`replayInitialize`).
   */
  private streamableSession(
    Transport: typeof NodeStreamableHTTPServerTransport,
    scope: Scope,
    owner: string,
    gate: ToolGate | undefined,
    listing: ToolListing | undefined,
    id: string,
    rebuilt?: SessionClaims
  ): StreamableSession {
    const transport = new Transport({ sessionIdGenerator: () => id })
    if (rebuilt !== undefined) markInitialized(transport, id)
    const session = this.addSession<StreamableSession>(scope, owner, gate, listing, { id, kind: "streamable", transport, ready: Promise.resolve() })
    if (session.spans !== undefined && rebuilt !== undefined) session.spans.protocolVersion = rebuilt.protocolVersion
    session.transport.onclose = () => this.forget(session)
    const connected = session.server.connect(transport)
    session.ready = rebuilt === undefined ? connected : connected.then(() => replayInitialize(transport, rebuilt))
    return session
  }

  /** A session of either kind with its server, in the map at once. */
  private addSession<S extends Session>(scope: Scope, owner: string, gate: ToolGate | undefined, listing: ToolListing | undefined, parts: Pick<S, "id" | "kind" | "transport"> & Partial<S>): S {
    const offers = this.ops.catalog.scopeCapabilities(this.scopeContext(scope))
    const catalogListed = offers.resources || offers.prompts ? this.ops.catalog.catalogFingerprint(this.scopeContext(scope)) : { resources: "", prompts: "" }
    const state = {
      ...parts,
      scope,
      gate,
      listing,
      owner,
      offers,
      catalogListed,
      subscriptions: new Map<string, string>(),
      notFound: new Set<string | number>(),
      // Tracing on: the spans of its requests, watching its transport (before the SDK server connects to it).
      spans: this.store.tracer.enabled ? new SessionSpans(this.store.tracer, () => parts.id) : undefined,
      logLevel: undefined,
      listed: this.toolNames(scope, gate, listing),
      busy: 0,
      touchedAt: performance.now()
    }
    // The handlers keep the very object that becomes the session (they update `listed`).
    const session = Object.assign(state, { server: this.buildServer(scope, state) }) as S
    // Under restoreNotFound's `send`: the spans see the answers as the client gets them.
    session.spans?.watch(session.transport as never)
    restoreNotFound(session.transport as Pick<Transport, "send">, session.notFound)
    this.sessions.set(session.id, session)
    for (const name of Object.keys(this.store.serviceActors(scope))) this.watchLogs(scopeLabel(scope), name)
    return session
  }

  /** A session's SDK server and its handlers, the same for every transport. */
  private buildServer(scope: Scope, session: Omit<SessionState, "server">): Server {
    // `logging`: the store takes logging/setLevel itself and relays its services' log messages (log-relay.ts).
    const server = mcpServer(scope, session.offers)
    this.serveCatalog(server, session)
    // Replaces the SDK's own handler: the level is the session's, read by the relay.
    // (A level MCP does not know is refused by the SDK's parse of the request, as every bad request is.)
    server.setRequestHandler("logging/setLevel", async (request) => {
      session.logLevel = request.params.level
      this.logs.levelsChanged(scopeLabel(scope))
      return {}
    })
    server.setRequestHandler("tools/list", async () => {
      const tools = listedTools(this.store, scope, session.gate, session.listing)
      session.listed = namesOf(tools)
      return { tools }
    })
    server.setRequestHandler("tools/call", async (request, c) => {
      // Search mode: search_tools is answered here, call_tool calls the tool it names (search-mode.ts).
      const route = session.listing === undefined ? request.params : routeSearchCall(this.store, scope, session.gate, request.params.name, request.params.arguments)
      if ("answer" in route) return route.answer as never
      // The client's progressToken: each upstream progress comes back to it.
      const token = c.mcpReq._meta?.progressToken ?? request.params._meta?.progressToken
      // Its notifications/cancelled aborts `c.mcpReq.signal`.
      // The upstream's result as it came (the SDK checks its shape).
      const result = await callOverMcp(
        this.ops.calls,
        this.store,
        scope,
        session.gate,
        {
          name: route.name,
          arguments: route.arguments,
          // The client's trace context (W3C keys of `_meta`): the call's span continues its trace.
          trace: readTraceContext(request.params._meta),
          sessionId: session.id,
          requestId: c.mcpReq.id,
          caller: () => ({ words: `an MCP client (session of ${session.owner.slice(0, 8)})`, owner: session.owner }),
          ...(token !== undefined ? { progress: (p: CallProgress) => c.mcpReq.notify({ method: "notifications/progress", params: { progressToken: token, ...p } }) } : {}),
          relay: sessionRelay(server, c, "call")
        },
        c.mcpReq.signal
      )
      return result as never
    })
    return server
  }

  /**
   * Handles one HTTP request of the MCP endpoint. `body` is the parsed JSON body (already read by
   * the HTTP layer). Resolves when the response is finished (a GET stream stays open until then).
   */
  async handle(scope: Scope, req: IncomingMessage, res: ServerResponse, body: unknown, owner: string, gate?: ToolGate, listing?: ToolListing): Promise<void> {
    if (this.refusedWhileClosing(res)) return
    const id = req.headers["mcp-session-id"]
    const sessionId = Array.isArray(id) ? id[0] : id
    let session: StreamableSession | undefined
    let created = false
    if (sessionId !== undefined) {
      // A session of another scope, transport or key is unknown here, as is an id no store made.
      session = await this.findOrRebuild(scope, sessionId, owner, gate, listing, req, res)
      if (session === undefined) return
    } else {
      if (req.method !== "POST" || !initializes(body)) {
        // A missing session is 400 (MCP, Streamable HTTP); only an initialize request starts a
        // session (so nothing is evicted for a stray request).
        return jsonRpcError(res, 400, -32000, "Bad Request: Mcp-Session-Id header is required")
      }
      const { NodeStreamableHTTPServerTransport } = streamableTransport.loaded ?? (await streamableTransport.load())
      const seal = await this.sealOrFail(true, res)
      if (seal === undefined || this.refusedWhileClosing(res) || !this.admit(req, res, owner)) return
      const facts = clientFacts(initializeParams(body))
      session = this.streamableSession(NodeStreamableHTTPServerTransport, scope, owner, gate, listing, seal.seal({ scope, ...facts, owner, issuedAt: Date.now() }))
      created = true
    }
    this.begin(session)
    try {
      const failed = await session.ready.then(
        () => undefined,
        (e: unknown) => (e instanceof Error ? e.message : String(e))
      )
      if (failed !== undefined) {
        // A session that could not be connected or rebuilt is not kept: the client initializes again.
        log.warn(`MCP session ${shortId(session.id)} on ${scopeLabel(scope)} could not be started: ${failed}`, { event: "mcp_session_failed", scope: scopeLabel(scope) })
        this.closeSession(session)
        return jsonRpcError(res, 404, -32001, "Session not found")
      }
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
   * The session of a request's id: the one in the map, or one rebuilt from its sealed id; undefined
   * when it was answered (404 for an id that is unknown, changed, expired, ended here, of another
   * scope or of another key; 200 for a DELETE of a sealed id not in the map: nothing to end).
   */
  private async findOrRebuild(scope: Scope, id: string, owner: string, gate: ToolGate | undefined, listing: ToolListing | undefined, req: IncomingMessage, res: ServerResponse): Promise<StreamableSession | undefined> {
    const label = scopeLabel(scope)
    const refuse = (why: string, level: "info" | "warn" = "warn") => {
      log[level](`refused MCP session ${shortId(id)} on ${label}: ${why}`, { event: "mcp_session_refused", scope: label, reason: why })
      jsonRpcError(res, 404, -32001, "Session not found")
      return undefined
    }
    const known = this.sessions.get(id)
    if (known !== undefined) {
      if (known.kind !== "streamable" || scopeLabel(known.scope) !== label) return refuse("the session is not one of this endpoint")
      if (known.owner !== owner) return refuse("the session was opened with another API key")
      return known
    }
    if (id.length > MAX_SESSION_ID_LENGTH) return refuse("the id is too long")
    const expires = this.ended.get(sealedIdKey(id))
    if (expires !== undefined) return refuse("the session was ended (closed, idle or evicted)", "info")
    const { NodeStreamableHTTPServerTransport } = streamableTransport.loaded ?? (await streamableTransport.load())
    const seal = await this.sealOrFail(false, res)
    if (res.headersSent) return undefined
    const claims = seal?.open(id)
    if (claims === undefined) return refuse("not a session id of this store (unknown, changed or sealed with another key)")
    if (scopeLabel(claims.scope) !== label) return refuse(`the session belongs to ${scopeLabel(claims.scope)}`)
    if (claims.owner !== owner) return refuse("the session was opened with another API key")
    const now = Date.now()
    if (claims.issuedAt > now + CLOCK_SKEW_MS || now - claims.issuedAt > sessionMaxAgeMs(this.options.idleSeconds)) return refuse("the sealed id has expired", "info")
    if (this.refusedWhileClosing(res)) return undefined
    // Another request of the session rebuilt it meanwhile (the key was loading), or ended it (its DELETE).
    const again = this.sessions.get(id)
    if (again?.kind === "streamable") return again
    if (this.ended.has(sealedIdKey(id))) return refuse("the session was ended (closed, idle or evicted)", "info")
    if (req.method === "DELETE") {
      // Nothing of it lives here: remember it as ended, so it is not rebuilt by this process.
      this.remember(id, claims.issuedAt)
      log.info(`MCP session ${shortId(id)} on ${label} ended by its client (not open on this store)`, { event: "mcp_session_deleted", scope: label })
      res.writeHead(200).end()
      return undefined
    }
    if (!this.admit(req, res, owner)) return undefined
    log.info(`rebuilt MCP session ${shortId(id)} on ${label} from its sealed id (client ${JSON.stringify(claims.clientInfo.name)}, opened ${new Date(claims.issuedAt).toISOString()})`, {
      event: "mcp_session_rebuilt",
      scope: label
    })
    return this.streamableSession(NodeStreamableHTTPServerTransport, scope, owner, gate, listing, id, claims)
  }

  /** The seal (creating the key when `create`); a key file that cannot be read is answered 500 and logged. */
  private async sealOrFail(create: boolean, res: ServerResponse) {
    try {
      return await this.options.seal(create)
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e)
      log.error(`MCP sessions cannot be sealed or opened: ${message}`, { event: "mcp_session_key_failed" })
      jsonRpcError(res, 500, -32603, "Internal error: the store's session key cannot be read")
      return undefined
    }
  }

  /** Remembers an ended session's id until it would expire anyway, the oldest forgotten past MAX_ENDED_SESSIONS. */
  private remember(id: string, issuedAt: number): void {
    const now = Date.now()
    this.ended.set(sealedIdKey(id), issuedAt + sessionMaxAgeMs(this.options.idleSeconds))
    for (const [digest, expires] of this.ended) {
      if (this.ended.size <= MAX_ENDED_SESSIONS && expires > now) break
      this.ended.delete(digest)
    }
  }

  /**
   * GET of the legacy SSE endpoint (src/http/gateway/sse-endpoint.ts): a new session whose stream carries
   * every answer and notification, its first event the URL to POST messages to. Resolves when the
   * stream ends (the client left, the session expired or was closed, shutdown).
   */
  async openSse(scope: Scope, req: IncomingMessage, res: ServerResponse, owner: string, gate?: ToolGate, listing?: ToolListing): Promise<void> {
    const { SSEServerTransport } = sseTransport.loaded ?? (await sseTransport.load())
    if (this.refusedWhileClosing(res)) return
    if (!acceptsEventStream(req)) return jsonRpcError(res, 406, -32000, "Not Acceptable: the client must accept text/event-stream")
    if (!this.admit(req, res, owner)) return
    const transport = new SSEServerTransport(messagesPath(scope), res)
    const session = this.addSession<SseSession>(scope, owner, gate, listing, { id: transport.sessionId, kind: "sse", transport, stream: res })
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
  async postMessage(scope: Scope, req: IncomingMessage, res: ServerResponse, body: unknown, owner: string): Promise<void> {
    if (this.refusedWhileClosing(res)) return
    const id = sessionIdOf(req)
    if (id === undefined) return jsonRpcError(res, 400, -32000, "Bad Request: the sessionId query parameter is required")
    const session = this.sessions.get(id)
    // A session of another scope, of the other transport or of another key is unknown here.
    if (session?.kind !== "sse" || scopeLabel(session.scope) !== scopeLabel(scope)) return jsonRpcError(res, 404, -32001, "Session not found")
    if (session.owner !== owner) {
      log.warn(`refused MCP session ${shortId(id)} on ${scopeLabel(scope)}: the session was opened with another API key`, { event: "mcp_session_refused", scope: scopeLabel(scope), reason: "another key" })
      return jsonRpcError(res, 404, -32001, "Session not found")
    }
    // The body is checked as SDK 1.x's transport then parses it (loaded already: the session's GET loaded it).
    const { JSONRPCMessageSchema } = sseTransport.loaded ?? (await sseTransport.load())
    if (!JSONRPCMessageSchema.safeParse(body).success) return jsonRpcError(res, 400, -32600, "Invalid Request: the body must be one JSON-RPC message")
    // A request (not a notification or an answer): within the session's bounds (`busy`: its requests in flight).
    const request = typeof (body as { method?: unknown }).method === "string" && (body as { id?: unknown }).id !== undefined
    const unread = session.stream.writableLength > MAX_SSE_UNREAD_BYTES
    if (request && (session.busy >= MAX_SSE_REQUESTS_IN_FLIGHT || unread)) {
      const message = unread
        ? `Too many answers wait unread on this session's event stream (over ${MAX_SSE_UNREAD_BYTES} bytes): read them first`
        : `Too many requests in flight on this session (${MAX_SSE_REQUESTS_IN_FLIGHT}): wait for their answers`
      log.warn(`MCP session ${shortId(id)} on ${scopeLabel(scope)}: a request refused: ${message}`, { event: "mcp_request_refused", scope: scopeLabel(scope) })
      return jsonRpcError(res, 429, TOO_MANY_CODE, message, {
        id: (body as { id?: unknown }).id,
        headers: { "retry-after": String(MCP_RETRY_AFTER_SECONDS) },
        data: tooManyData({ limit: "sse_requests_in_flight", max: MAX_SSE_REQUESTS_IN_FLIGHT, retryAfterSeconds: MCP_RETRY_AFTER_SECONDS })
      })
    }
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
    if (this.shuttingDown) jsonRpcError(res, 503, -32000, "Server shutting down", { headers: { connection: "close" } })
    return this.shuttingDown
  }

  /**
   * Makes room for a new session of `owner`, or answers 429 with Retry-After; true when admitted.
   * A request with a key holds at most its key's share of the sessions (`keyShare`): at its share,
   * the key's own oldest idle session is closed, and when all of them are busy it is refused, so one
   * agent's key cannot take every session from the others. Then, at the cap, the oldest idle
   * session of any key makes room.
   */
  private admit(req: IncomingMessage, res: ServerResponse, owner: string): boolean {
    if (req.headers.authorization !== undefined && !this.makeRoomForKey(owner)) {
      const share = keyShare(this.options.maxSessions)
      log.warn(`MCP session refused: this API key holds ${share} busy sessions, its most`, { event: "mcp_session_refused" })
      tooManySessions(res, `Too many MCP sessions for this API key: all ${share} of its sessions are busy; try again later`, share)
      return false
    }
    if (this.makeRoom()) return true
    const max = this.options.maxSessions
    const message = `Too many MCP sessions: all ${max} are busy; try again later`
    tooManySessions(res, message, max)
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

  /** At a key's share, closes its oldest idle session; false when every one of its sessions is busy. */
  private makeRoomForKey(owner: string): boolean {
    let held = 0
    let idle: Session | undefined
    for (const session of this.sessions.values()) {
      if (session.owner !== owner) continue
      held += 1
      if (idle === undefined && session.busy === 0 && session.kind !== "sse") idle = session
    }
    if (held < keyShare(this.options.maxSessions)) return true
    if (idle === undefined) return false
    this.closeSession(idle)
    return true
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
    // A sealed id this process ended is not rebuilt by it (another replica or a restart may: docs/sessions.md).
    if (session.kind === "streamable" && session.transport.sessionId !== undefined) this.remember(session.id, Date.now())
    for (const key of session.subscriptions.keys()) this.dropSubscriber(key, session.id)
    session.subscriptions.clear()
    session.spans?.closeAll()
    if (session.logLevel !== undefined) this.logs.levelsChanged(scopeLabel(session.scope))
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
    this.unsubscribeMonitor()
    this.logs.close()
    for (const { off } of this.onConnection.values()) off()
    this.onConnection.clear()
    // The principals' connections are no longer held (the pool closes them as the store stops).
    for (const sub of this.subscriptions.values()) {
      const hold = sub.hold
      sub.hold = undefined
      hold?.release()
    }
    this.subscriptions.clear()
    this.clearSweep()
    const sessions = [...this.sessions.values()]
    this.sessions.clear()
    await Promise.all(sessions.map((s) => s.server.close().catch(() => undefined)))
  }
}

/**
 * Initializes a rebuilt session's server as the client's initialize did (protocol version,
 * capabilities and info, which `getClientCapabilities` then reads), through the transport's public
 * `onmessage`; the answer, which nobody waits for, is taken off the transport's `send`.
 */
const replayInitialize = async (transport: NodeStreamableHTTPServerTransport, claims: SessionClaims): Promise<void> => {
  const id = `mcp-store/rebuild/${randomUUID()}`
  const send = transport.send.bind(transport)
  const answered = new Promise<void>((resolve, reject) => {
    transport.send = async (message, options) => {
      if (!("id" in message) || message.id !== id || "method" in message) return send(message, options)
      transport.send = send
      if ("error" in message) reject(new Error(`the rebuilt session's initialize failed: ${message.error.message}`))
      else resolve()
    }
  })
  const deliver = (message: JSONRPCMessage) => transport.onmessage?.(message)
  deliver({ jsonrpc: "2.0", id, method: "initialize", params: { protocolVersion: claims.protocolVersion, capabilities: claims.capabilities, clientInfo: claims.clientInfo } })
  await answered
  deliver({ jsonrpc: "2.0", method: "notifications/initialized" })
}
