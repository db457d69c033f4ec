/**
 * The service machine: one actor per registered service, modelling connection, health checks,
 * reconnection with backoff, tool refresh, disconnect and restart (docs/lifecycle.md).
 *
 * The machine is pure. Its side effects are the named actors of `setup()` (connect, hold the
 * connection, list tools, close), supplied by src/runtime/adapter.ts with `.provide(...)`; time
 * passes only through `after` delays, so tests drive it with a SimulatedClock. The status is the tag
 * of the active state (`statusOf`); every status change is recorded.
 *
 * A health check is a command to the actor that holds the connection (`CHECK_HEALTH`, withdrawn by
 * `CANCEL_CHECK` when the check state is left), not an actor of its own: a thousand services check
 * every 30 s, and each actor started and stopped costs XState a scan of every timer of the system.
 */
import { assign, fromCallback, fromPromise, sendTo, setup, type ActorRefFrom, type EventObject, type SnapshotFrom } from "xstate"
import { EMPTY_CATALOG, type Catalog, type CatalogCapabilities, type McpConnection, type ToolInfo } from "../mcp/types.js"
import type { EraVerdict } from "../mcp/era.js"
import { AUTHORIZE_HINT } from "../mcp/oauth-client.js"
import { STATUSES, type Scope, type ServiceDefinition, type Status } from "../domain/service-definition.js"
import type { MonitoringSettings } from "../domain/settings.js"
import type { ToolChange } from "../domain/pin-rules.js"

/** One recorded status change. `from` is null for the first status. */
export interface Transition {
  readonly from: Status | null
  readonly to: Status
  readonly at: number
  readonly reason: string
}

/** The outcome of one health check, scheduled or reported from outside (a tool call, check_services). */
export interface HealthReport {
  readonly ok: boolean
  readonly responseTimeMs?: number | undefined
  readonly error?: string | undefined
}

/** What the service actor is started with. */
export interface ServiceInput {
  readonly scope: Scope
  readonly name: string
  readonly definition: ServiceDefinition
  readonly settings: MonitoringSettings
  /** Set by a supervisor that restarts a crashed actor: start `unreachable` and retry after a backoff. */
  readonly crash?: { readonly error: string; readonly attempt: number } | undefined
  /** Wall-clock source for recorded times (tests may fix it). */
  readonly now?: (() => number) | undefined
  /** Source of jitter and check offsets (tests may fix it). */
  readonly random?: (() => number) | undefined
}

/** What a successful connection attempt yields. */
export interface ConnectOutput {
  readonly connection: McpConnection
  readonly tools: ReadonlyArray<ToolInfo>
  /** Its resources, resource templates and prompts (none when absent). */
  readonly catalog?: Catalog | undefined
  /** Why listing them failed, when it did (the service is connected all the same). */
  readonly catalogError?: string | undefined
  /** How long the server said its tool list stays fresh (2026-07-28 `ttlMs`; none from a 2025 server). */
  readonly toolsTtlMs?: number | undefined
  /** The same of its resources, templates and prompts (the least of the three lists'). */
  readonly catalogTtlMs?: number | undefined
  /** Its tools judged against their pins (src/runtime/tool-pins.ts); absent: nothing held. */
  readonly pins?: PinOutcome | undefined
}

/** A tool list judged against the service's pins: the tools held, the changes seen for the first time. */
export interface PinOutcome {
  readonly held: ReadonlyArray<ToolChange>
  readonly noticed: ReadonlyArray<ToolChange>
}

/** What a tool list refresh yields: the tools, and how long the server said they stay fresh. */
export interface ListedTools {
  readonly tools: ReadonlyArray<ToolInfo>
  readonly ttlMs?: number | undefined
  readonly pins?: PinOutcome | undefined
}

/** What a catalog refresh yields, with its freshness as for tools. */
export interface ListedCatalog {
  readonly catalog: Catalog
  readonly ttlMs?: number | undefined
}

export interface ConnectInput {
  readonly scope: Scope
  readonly name: string
  readonly definition: ServiceDefinition
  readonly timeoutMs: number
  /** The era the last connection found: a reconnection asks nothing again (src/mcp/era.ts). */
  readonly prior?: EraVerdict | undefined
  /** The tools the last list held (a change is told once). */
  readonly heldTools?: ReadonlyArray<ToolChange> | undefined
}

export interface ConnectionInput {
  readonly connection: McpConnection
  readonly watchTools: boolean
}

export interface CheckInput {
  readonly connection: McpConnection
  readonly timeoutMs: number
  /** The service, for a tool list judged against its pins. */
  readonly scope?: Scope | undefined
  readonly name?: string | undefined
  readonly definition?: ServiceDefinition | undefined
  readonly heldTools?: ReadonlyArray<ToolChange> | undefined
}

/**
 * What the machine asks of the actor that holds the connection (`holdConnection`). `CHECK_HEALTH`
 * starts one health check (MCP ping) whose outcome comes back as HEALTH_REPORT (or TRANSPORT_CLOSED
 * when the session expired); `CANCEL_CHECK` withdraws a check still running: its outcome is dropped.
 */
export type ConnectionCommand =
  | { readonly type: "CHECK_HEALTH"; readonly timeoutMs: number }
  | { readonly type: "CANCEL_CHECK" }

/** The id of the invoked `holdConnection` actor, the target of `ConnectionCommand`s. */
export const CONNECTION_ACTOR_ID = "connection"

export type ServiceEvent =
  | { readonly type: "TRANSPORT_CLOSED"; readonly reason: string; readonly immediate?: boolean }
  | ({ readonly type: "HEALTH_REPORT" } & HealthReport)
  | { readonly type: "TOOLS_CHANGED" }
  /** The server announced a change of its resources or prompts (list_changed). */
  | { readonly type: "CATALOG_CHANGED" }
  | { readonly type: "REFRESH_TOOLS" }
  | { readonly type: "DISCONNECT"; readonly reason?: string | undefined }
  /**
   * `fromDefinitions`: sent by every replica that applies the same change of the definitions
   * (src/runtime/store.ts applyConfig), so a replica that does not run the service leaves it to the
   * one that does (src/machines/replicated.ts) instead of passing it on.
   */
  | { readonly type: "RESTART"; readonly reason?: string | undefined; readonly fromDefinitions?: boolean | undefined }
  | { readonly type: "UPDATE_DEFINITION"; readonly definition: ServiceDefinition }
  /** The upstream's OAuth state changed (src/runtime/upstream-oauth.ts): shown in the views, nothing else. */
  | { readonly type: "AUTH_CHANGED"; readonly auth: AuthInfo | undefined }
  /** The upstream needs a user to authorize the store: wait for AUTHORIZED, with no traffic meanwhile. */
  | { readonly type: "AUTH_REQUIRED"; readonly reason: string }
  /** A user authorized the store (or a machine credential was obtained): connect now. */
  | { readonly type: "AUTHORIZED" }

/**
 * An OAuth-protected upstream's authorization as clients see it (never a token): `required`, the
 * state of the flow, the URL a user opens, the scopes and when the access token expires.
 */
export interface AuthInfo {
  readonly required: true
  readonly state: "needs_authorization" | "authorizing" | "authorized" | "refresh_failed"
  readonly authorization_url?: string | undefined
  readonly scopes?: ReadonlyArray<string> | undefined
  readonly expires_at?: string | undefined
}

export interface ServiceContext {
  readonly scope: Scope
  readonly name: string
  readonly definition: ServiceDefinition
  readonly settings: MonitoringSettings
  readonly now: () => number
  readonly random: () => number
  /** The status last entered (mirrors the active state's tag). */
  readonly status: Status | null
  /** Why the next status change happens; set by transitions, consumed by `enterStatus`. */
  readonly reason: string
  readonly connection: McpConnection | undefined
  readonly tools: ReadonlyArray<ToolInfo>
  readonly toolsUpdatedAt: number | undefined
  /** Incremented on each tool list refresh, so a waiter can tell one happened. */
  readonly toolsVersion: number
  /**
   * Tools of `tools` whose definition is not the pinned one (docs/tool-pins.md): not offered, calls
   * refused with TOOL_CHANGED, until an operator accepts them.
   */
  readonly heldTools: ReadonlyArray<ToolChange>
  /** The changes the last list that found any saw for the first time (a new array each time: the monitor tells them). */
  readonly toolChanges: ReadonlyArray<ToolChange>
  /** Resources, resource templates and prompts, refreshed as tools are (on connect, list_changed, the tools interval). */
  readonly catalog: Catalog
  /** Incremented on each catalog refresh (failed ones included). */
  readonly catalogVersion: number
  /** The `ttlMs` of the last tool list (undefined: none said, the 2025 era); bounds the next refresh (`listRefreshMs`). */
  readonly toolsTtlMs: number | undefined
  /** The same of the last catalog lists. */
  readonly catalogTtlMs: number | undefined
  /** Refreshes in a row that found the tool list as it was, under a ttl below the floor (backs the next one off). */
  readonly toolsUnchanged: number
  /** The same of the catalog. */
  readonly catalogUnchanged: number
  /**
   * What the server declared beside tools at its last connect; kept while it is away, so that what
   * the store offers (src/http/gateway/endpoint.ts) does not depend on the moment a client initializes.
   */
  readonly capabilities: CatalogCapabilities | undefined
  readonly consecutiveFailures: number
  readonly consecutiveSuccesses: number
  readonly reconnectAttempts: number
  /** Delay before the next reconnection attempt or health check, computed when the wait starts. */
  readonly nextDelayMs: number
  readonly nextRetryAt: number | undefined
  readonly immediateRetry: boolean
  readonly lastError: string | undefined
  /** What the user can do about the last connect failure (from the transport edge), if known. */
  readonly hint: string | undefined
  /** The last connect failure was permanent (retried only on the unreachable cadence). */
  readonly permanentFailure: boolean
  readonly lastHealthCheckAt: number | undefined
  readonly responseTimeMs: number | undefined
  readonly stateEnteredAt: number
  readonly transitions: ReadonlyArray<Transition>
  readonly crash: { readonly error: string; readonly attempt: number } | undefined
  /** The upstream's OAuth state, when it requires authorization (views only). */
  readonly auth: AuthInfo | undefined
  /**
   * The protocol era and revision the last connection spoke (negotiated or pinned): handed to the
   * next connect, and shown as `protocol_version`. Forgotten when the definition changes.
   */
  readonly era: EraVerdict | undefined
}

const MAX_TRANSITIONS = 20

const errorText = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/**
 * What a connect failure may say about itself (src/mcp/types.ts, McpRequestError): `permanent`
 * when retrying soon cannot mend it, and a `hint` for the user. Read structurally: the machine
 * knows nothing of the transports.
 */
interface FailureFacts {
  readonly permanent?: unknown
  readonly hint?: unknown
  /** The upstream answered with an OAuth bearer challenge that only a user can meet. */
  readonly authorizationRequired?: unknown
}
const failureOf = (event: { readonly type: string }): FailureFacts | undefined => {
  if (!event.type.startsWith("xstate.error.actor")) return undefined
  const error = (event as unknown as { error: unknown }).error
  return typeof error === "object" && error !== null ? (error as FailureFacts) : undefined
}

/** Reconnection backoff: 1 s, 2 s, 4 s ... with ±10 % jitter, never above `reconnection_seconds`. */
export const backoffMs = (attempt: number, settings: MonitoringSettings, random: () => number): number => {
  const base = 1000 * 2 ** Math.min(attempt, 30)
  const jittered = base * (1 + (random() * 2 - 1) * 0.1)
  return Math.max(0, Math.min(jittered, settings.reconnection_seconds * 1000))
}

/**
 * The least time between two lists of a connected service when the server's `ttlMs` asks for less
 * than the tools interval: a ttl of 0 ("stale at once", what the SDK v2 sends by default) or of a few
 * milliseconds must not make the store list in a loop.
 */
export const MIN_LIST_TTL_MS = 5_000

/**
 * When a connected service's list (tools, or catalog) is listed again unless a change is announced
 * first: after the tools interval (`tools_update_hours`), or sooner when the server said its list
 * stays fresh for less (`ttlMs`, 2026-07-28 era); then up to 10 % early at random (many services
 * with one ttl do not list at once; the ttl stays an upper bound), never before `MIN_LIST_TTL_MS`.
 * A ttl below that floor says nothing the store can keep to ("stale at once"): such a list is
 * polled, and the revision asks a client that polls to back off: the floor doubles with each
 * refresh in a row that found the list `unchanged` (5 s, 10 s, 20 s ... up to the interval), back
 * to the floor when it changed.
 */
export const listRefreshMs = (ttlMs: number | undefined, settings: MonitoringSettings, random: () => number, unchanged = 0): number => {
  const interval = settings.tools_update_hours * 3_600_000
  if (ttlMs === undefined || ttlMs >= interval) return interval
  if (ttlMs < MIN_LIST_TTL_MS) return Math.min(interval, Math.max(MIN_LIST_TTL_MS, MIN_LIST_TTL_MS * 2 ** Math.min(unchanged, 30) * (1 - random() * 0.1)))
  return Math.min(interval, Math.max(MIN_LIST_TTL_MS, ttlMs * (1 - random() * 0.1)))
}

/** Whether a list came back as it was (the same items, field for field): backs a sub-floor ttl's polling off. */
const sameList = (before: unknown, after: unknown): boolean => before === after || JSON.stringify(before) === JSON.stringify(after)

/** What each connection attempt gets (initializing, reconnecting, unreachable). */
const connectInput = ({ context }: { context: ServiceContext }): ConnectInput => ({
  scope: context.scope,
  name: context.name,
  definition: context.definition,
  timeoutMs: context.settings.initialization_timeout_seconds * 1000,
  prior: context.era,
  heldTools: context.heldTools
})

/** A service actor's context before anything happened (the service machine's, and the replicated one's: src/machines/replicated.ts). */
export const initialServiceContext = (input: ServiceInput): ServiceContext => {
  const now = input.now ?? Date.now
  return {
    scope: input.scope,
    name: input.name,
    definition: input.definition,
    settings: input.settings,
    now,
    random: input.random ?? Math.random,
    status: null,
    reason: "added",
    connection: undefined,
    tools: [],
    toolsUpdatedAt: undefined,
    toolsVersion: 0,
    heldTools: [],
    toolChanges: [],
    catalog: EMPTY_CATALOG,
    catalogVersion: 0,
    toolsTtlMs: undefined,
    catalogTtlMs: undefined,
    toolsUnchanged: 0,
    catalogUnchanged: 0,
    capabilities: undefined,
    consecutiveFailures: 0,
    consecutiveSuccesses: 0,
    reconnectAttempts: 0,
    nextDelayMs: 0,
    nextRetryAt: undefined,
    immediateRetry: false,
    lastError: undefined,
    hint: undefined,
    permanentFailure: false,
    lastHealthCheckAt: undefined,
    responseTimeMs: undefined,
    stateEnteredAt: now(),
    transitions: [],
    crash: input.crash,
    auth: undefined,
    era: undefined
  }
}

/** What a tool refresh gets: the live connection and the request time-out. */
const checkInput = ({ context }: { context: ServiceContext }): CheckInput => ({
  connection: context.connection as McpConnection,
  timeoutMs: context.settings.ping_timeout_seconds * 1000,
  scope: context.scope,
  name: context.name,
  definition: context.definition,
  heldTools: context.heldTools
})

/** The pin fields of a context after a list judged as `pins` says (nothing held when it was not judged). */
const pinned = (context: ServiceContext, pins: PinOutcome | undefined) => ({
  heldTools: pins?.held ?? [],
  toolChanges: pins !== undefined && pins.noticed.length > 0 ? pins.noticed : context.toolChanges
})

/**
 * A list that the connected service refreshes (its tools; its resources, templates and prompts):
 * idle until `interval` passes (the tools interval, or the server's shorter ttl: `listRefreshMs`;
 * when `enabled`), REFRESH_TOOLS (when `requested` allows) or
 * the server's list_changed (`changed`, when `enabled`); then `list` runs, its answer stored by
 * `listed` or its failure by `failed`. A change announced during a refresh may not be in the
 * answer: it lists again.
 */
const listRefresh = (r: {
  readonly list: "listTools" | "listCatalog"
  readonly interval: "toolsRefresh" | "catalogRefresh"
  readonly changed: "TOOLS_CHANGED" | "CATALOG_CHANGED"
  readonly enabled: "toolsUpdateEnabled" | "catalogUpdateEnabled"
  readonly requested: "offersCatalog" | undefined
  readonly listed: "toolsListed" | "catalogListed"
  readonly failed: "toolsListFailed" | "catalogListFailed"
}) => {
  const change = { guard: r.enabled, target: "refreshing" } as const
  return {
    initial: "idle",
    states: {
      idle: {
        after: { [r.interval]: change },
        on: { REFRESH_TOOLS: r.requested === undefined ? "refreshing" : { guard: r.requested, target: "refreshing" }, [r.changed]: change }
      },
      refreshing: {
        invoke: { src: r.list, input: checkInput, onDone: { target: "idle", actions: r.listed }, onError: { target: "idle", actions: r.failed } },
        on: { [r.changed]: { ...change, reenter: true } }
      }
    }
  } as const
}

export const serviceMachine = setup({
  types: {
    context: {} as ServiceContext,
    events: {} as ServiceEvent,
    input: {} as ServiceInput
  },
  actors: {
    /** Opens a new client and transport and lists the tools. Supplied by the runtime. */
    connect: fromPlaceholderPromise<ConnectOutput, ConnectInput>("connect"),
    /**
     * Owns a live connection while the service is connected: reports its events, runs the health
     * checks it is sent (`ConnectionCommand`), closes it on exit.
     */
    holdConnection: fromPlaceholderCallback<ConnectionInput, ConnectionCommand>("holdConnection"),
    /** Lists the tools again. */
    listTools: fromPlaceholderPromise<ListedTools, CheckInput>("listTools"),
    /** Lists the resources, resource templates and prompts again. */
    listCatalog: fromPlaceholderPromise<ListedCatalog, CheckInput>("listCatalog"),
    /** Closes a connection (session DELETE, process tree ended) and resolves when it is done. */
    closeConnection: fromPlaceholderPromise<void, { readonly connection: McpConnection | undefined }>(
      "closeConnection"
    )
  },
  delays: {
    nextDelay: ({ context }) => context.nextDelayMs,
    warningInterval: ({ context }) => context.settings.warning_check_seconds * 1000,
    initializationTimeout: ({ context }) => context.settings.initialization_timeout_seconds * 1000,
    toolsRefresh: ({ context }) => listRefreshMs(context.toolsTtlMs, context.settings, context.random, context.toolsUnchanged),
    catalogRefresh: ({ context }) => listRefreshMs(context.catalogTtlMs, context.settings, context.random, context.catalogUnchanged),
    unreachableRetry: ({ context }) => context.settings.unreachable_retry_seconds * 1000,
    disconnectionTimeout: ({ context }) => context.settings.disconnection_timeout_seconds * 1000
  },
  guards: {
    isDisabled: ({ context }) => context.definition.disabled === true,
    isCrashed: ({ context }) => context.crash !== undefined,
    definitionDisabled: ({ event }) => event.type === "UPDATE_DEFINITION" && event.definition.disabled === true,
    reconnectionDisabled: ({ context }) => !context.settings.enable_reconnection,
    reconnectionEnabled: ({ context }) => context.settings.enable_reconnection,
    toolsUpdateEnabled: ({ context }) => context.settings.enable_tools_update,
    /** The server offers resources or prompts: the catalog region lists them. */
    offersCatalog: ({ context }) => context.capabilities?.resources === true || context.capabilities?.prompts === true,
    catalogUpdateEnabled: ({ context }) =>
      context.settings.enable_tools_update && (context.capabilities?.resources === true || context.capabilities?.prompts === true),
    reportFast: ({ context, event }) =>
      event.type === "HEALTH_REPORT" &&
      event.ok &&
      (event.responseTimeMs === undefined || event.responseTimeMs <= context.settings.slow_response_ms),
    reportSlow: ({ event }) => event.type === "HEALTH_REPORT" && event.ok,
    failureThresholdReached: ({ context }) =>
      context.consecutiveFailures + 1 >= context.settings.reconnecting_failure_threshold,
    attemptsExhausted: ({ context }) => context.reconnectAttempts + 1 >= context.settings.max_reconnect_attempts,
    /** The connect failure cannot be mended by retrying soon (an executable not found, HTTP 404 to initialize...). */
    permanentFailure: ({ event }) => failureOf(event)?.permanent === true,
    /** The connect failure is an OAuth challenge that only a user can meet (src/mcp/oauth-client.ts). */
    authorizationRequired: ({ event }) => failureOf(event)?.authorizationRequired === true,
    /** Not stopped by a user: an authorization need or grant is acted on. */
    running: ({ context }) => context.status !== "disconnected" && context.status !== "disconnecting",
    /** Waiting to retry a connection: a fresh authorization is worth trying at once. */
    retrying: ({ context }) => context.status === "reconnecting" || context.status === "unreachable"
  },
  actions: {
    /** Asks the connection holder for one health check (MCP ping); HEALTH_REPORT comes back. */
    startCheck: sendTo(
      CONNECTION_ACTOR_ID,
      ({ context }): ConnectionCommand => ({ type: "CHECK_HEALTH", timeoutMs: context.settings.ping_timeout_seconds * 1000 })
    ),
    /** Withdraws a check still running (the check state was left: a report came from elsewhere). */
    cancelCheck: sendTo(CONNECTION_ACTOR_ID, { type: "CANCEL_CHECK" } satisfies ConnectionCommand),
    /** Records a status change (from, to, at, reason) when the status really changes. */
    enterStatus: assign(({ context }, params: { status: Status }) => {
      if (context.status === params.status) return {}
      const at = context.now()
      const transition: Transition = { from: context.status, to: params.status, at, reason: context.reason }
      return {
        status: params.status,
        stateEnteredAt: at,
        transitions: [...context.transitions.slice(-(MAX_TRANSITIONS - 1)), transition]
      }
    }),
    because: assign((_, params: { reason: string }) => ({ reason: params.reason })),
    connected: assign(({ context, event }) => {
      const output = (event as unknown as { output: ConnectOutput }).output
      // A reconnection keeps the tools it had when `update_tools_on_reconnection` is off.
      const keepTools =
        context.status !== "initializing" && context.toolsUpdatedAt !== undefined && !context.settings.update_tools_on_reconnection
      return {
        connection: output.connection,
        capabilities: output.connection.capabilities,
        era: output.connection.era ?? context.era,
        // The lists were asked again on connecting, kept or not: their freshness is theirs.
        toolsTtlMs: output.toolsTtlMs,
        catalogTtlMs: output.catalogTtlMs,
        toolsUnchanged: 0,
        catalogUnchanged: 0,
        ...(keepTools
          ? {}
          : {
              tools: output.tools,
              toolsUpdatedAt: context.now(),
              toolsVersion: context.toolsVersion + 1,
              ...pinned(context, output.pins),
              catalog: output.catalog ?? EMPTY_CATALOG,
              catalogVersion: context.catalogVersion + 1
            }),
        ...(output.catalogError !== undefined ? { lastError: `resource and prompt list failed: ${output.catalogError}` } : {}),
        reconnectAttempts: 0,
        consecutiveFailures: 0,
        immediateRetry: false,
        nextRetryAt: undefined,
        crash: undefined,
        hint: undefined,
        permanentFailure: false,
        reason: context.status === "initializing" ? "connected" : "reconnected",
        // The first check starts at a random offset so that many services do not ping at once.
        nextDelayMs: context.random() * context.settings.health_check_seconds * 1000
      }
    }),
    connectFailed: assign(({ context, event }) => {
      const error =
        event.type.startsWith("xstate.error.actor")
          ? errorText((event as unknown as { error: unknown }).error)
          : `no connection within ${context.settings.initialization_timeout_seconds} s`
      const failure = failureOf(event)
      const hint = typeof failure?.hint === "string" ? failure.hint : undefined
      return { lastError: error, hint, permanentFailure: failure?.permanent === true, reason: error, connection: undefined }
    }),
    attemptFailed: assign(({ context }) => ({ reconnectAttempts: context.reconnectAttempts + 1 })),
    scheduleReconnect: assign(({ context }) => {
      const delay = context.immediateRetry ? 0 : backoffMs(context.reconnectAttempts, context.settings, context.random)
      return { nextDelayMs: delay, nextRetryAt: context.now() + delay, immediateRetry: false }
    }),
    scheduleUnreachableRetry: assign(({ context }) =>
      context.settings.enable_reconnection
        ? { nextRetryAt: context.now() + context.settings.unreachable_retry_seconds * 1000 }
        : { nextRetryAt: undefined }
    ),
    scheduleCrashRestart: assign(({ context }) => {
      const delay = backoffMs(Math.max(0, (context.crash?.attempt ?? 1) - 1), context.settings, context.random)
      return {
        nextDelayMs: delay,
        nextRetryAt: context.now() + delay,
        lastError: context.crash?.error,
        reason: `actor crashed: ${context.crash?.error ?? "unknown error"}`
      }
    }),
    checkSucceeded: assign(({ context, event }) => {
      const e = event as Extract<ServiceEvent, { type: "HEALTH_REPORT" }>
      const slow = e.responseTimeMs !== undefined && e.responseTimeMs > context.settings.slow_response_ms
      return {
        consecutiveFailures: 0,
        consecutiveSuccesses: slow ? 0 : context.consecutiveSuccesses + 1,
        lastHealthCheckAt: context.now(),
        responseTimeMs: e.responseTimeMs ?? context.responseTimeMs,
        reason: slow ? `slow response: ${Math.round(e.responseTimeMs ?? 0)} ms` : "health check answered",
        nextDelayMs: context.settings.health_check_seconds * 1000
      }
    }),
    checkFailed: assign(({ context, event }) => {
      const e = event as Extract<ServiceEvent, { type: "HEALTH_REPORT" }>
      const error = e.error ?? "health check failed"
      return {
        consecutiveFailures: context.consecutiveFailures + 1,
        consecutiveSuccesses: 0,
        lastHealthCheckAt: context.now(),
        lastError: error,
        reason: `health check failed: ${error}`,
        nextDelayMs: context.settings.health_check_seconds * 1000
      }
    }),
    transportClosed: assign(({ event }) => {
      const e = event as Extract<ServiceEvent, { type: "TRANSPORT_CLOSED" }>
      return { lastError: e.reason, reason: e.reason, immediateRetry: e.immediate === true }
    }),
    dropConnection: assign({ connection: undefined }),
    authChanged: assign(({ event }) => ({ auth: (event as Extract<ServiceEvent, { type: "AUTH_CHANGED" }>).auth })),
    authRequired: assign(({ event }) => {
      const reason = (event as Extract<ServiceEvent, { type: "AUTH_REQUIRED" }>).reason
      return { lastError: reason, reason, hint: AUTHORIZE_HINT }
    }),
    toolsListed: assign(({ context, event }) => {
      const output = (event as unknown as { output: ListedTools }).output
      // Compared only when a sub-floor ttl makes the store poll (`listRefreshMs`).
      const unchanged = output.ttlMs !== undefined && output.ttlMs < MIN_LIST_TTL_MS && sameList(context.tools, output.tools)
      return {
        tools: output.tools,
        toolsTtlMs: output.ttlMs,
        toolsUnchanged: unchanged ? context.toolsUnchanged + 1 : 0,
        toolsUpdatedAt: context.now(),
        toolsVersion: context.toolsVersion + 1,
        ...pinned(context, output.pins)
      }
    }),
    toolsListFailed: assign(({ context, event }) => ({
      lastError: `tool list refresh failed: ${errorText((event as unknown as { error: unknown }).error)}`,
      // A failed refresh still counts as a refresh attempt for anyone waiting on it.
      toolsVersion: context.toolsVersion + 1
    })),
    catalogListed: assign(({ context, event }) => {
      const output = (event as unknown as { output: ListedCatalog }).output
      const unchanged = output.ttlMs !== undefined && output.ttlMs < MIN_LIST_TTL_MS && sameList(context.catalog, output.catalog)
      return { catalog: output.catalog, catalogTtlMs: output.ttlMs, catalogUnchanged: unchanged ? context.catalogUnchanged + 1 : 0, catalogVersion: context.catalogVersion + 1 }
    }),
    catalogListFailed: assign(({ context, event }) => ({
      lastError: `resource and prompt list refresh failed: ${errorText((event as unknown as { error: unknown }).error)}`,
      catalogVersion: context.catalogVersion + 1
    })),
    resetCounters: assign({
      reconnectAttempts: 0,
      consecutiveFailures: 0,
      consecutiveSuccesses: 0,
      immediateRetry: false,
      nextRetryAt: undefined,
      crash: undefined
    }),
    newDefinition: assign(({ event }) => ({
      definition: (event as Extract<ServiceEvent, { type: "UPDATE_DEFINITION" }>).definition,
      era: undefined,
      hint: undefined,
      permanentFailure: false,
      reason: "definition changed"
    })),
    requested: assign(({ event }) => {
      const e = event as Extract<ServiceEvent, { type: "DISCONNECT" | "RESTART" }>
      return { reason: e.reason ?? (e.type === "DISCONNECT" ? "disconnect requested" : "restart requested") }
    })
  }
}).createMachine({
  id: "service",
  context: ({ input }) => initialServiceContext(input),
  initial: "start",
  on: {
    DISCONNECT: { target: ".disconnecting", actions: "requested" },
    RESTART: { target: ".initializing", reenter: true, actions: ["requested", "resetCounters"] },
    UPDATE_DEFINITION: [
      // A definition disabled in the services file stays disconnected until restarted.
      { guard: "definitionDisabled", target: ".disconnecting", actions: ["newDefinition", "resetCounters"] },
      { target: ".initializing", reenter: true, actions: ["newDefinition", "resetCounters"] }
    ],
    AUTH_CHANGED: { actions: "authChanged" },
    AUTH_REQUIRED: { guard: "running", target: ".awaitingAuthorization", actions: "authRequired" },
    AUTHORIZED: {
      guard: "retrying",
      target: ".initializing",
      actions: [{ type: "because", params: { reason: "authorized" } }, "resetCounters"]
    }
  },
  states: {
    start: {
      always: [
        { guard: "isDisabled", target: "disconnected", actions: { type: "because", params: { reason: "disabled in the services file" } } },
        { guard: "isCrashed", target: "crashed" },
        { target: "initializing" }
      ]
    },
    /** Restarted by its supervisor after a crash: unreachable until the backoff delay passes. */
    crashed: {
      tags: ["unreachable"],
      entry: ["scheduleCrashRestart", { type: "enterStatus", params: { status: "unreachable" } }],
      after: {
        nextDelay: { target: "initializing", actions: { type: "because", params: { reason: "restarted after a crash" } } }
      }
    },
    initializing: {
      tags: ["initializing"],
      entry: [{ type: "enterStatus", params: { status: "initializing" } }, "dropConnection"],
      invoke: {
        src: "connect",
        input: connectInput,
        onDone: { target: "connected", actions: "connected" },
        onError: [
          // Only a user can help: wait for the authorization, with no traffic meanwhile.
          { guard: "authorizationRequired", target: "awaitingAuthorization", actions: "connectFailed" },
          // Retrying soon cannot help: unreachable at once, retried on its slow cadence only.
          { guard: "permanentFailure", target: "unreachable", actions: "connectFailed" },
          { target: "lost", actions: "connectFailed" }
        ]
      },
      after: { initializationTimeout: { target: "lost", actions: "connectFailed" } }
    },
    /** Transient: where a failed service goes, depending on `enable_reconnection`. */
    lost: {
      always: [{ guard: "reconnectionDisabled", target: "unreachable" }, { target: "reconnecting" }]
    },
    connected: {
      type: "parallel",
      invoke: {
        id: CONNECTION_ACTOR_ID,
        src: "holdConnection",
        input: ({ context }) => ({
          connection: context.connection as McpConnection,
          watchTools: context.settings.enable_tools_update
        })
      },
      on: {
        TRANSPORT_CLOSED: { target: "lost", actions: "transportClosed" }
      },
      states: {
        health: {
          initial: "healthy",
          states: {
            healthy: {
              tags: ["healthy"],
              entry: { type: "enterStatus", params: { status: "healthy" } },
              initial: "idle",
              states: {
                idle: { after: { nextDelay: "checking" } },
                checking: { entry: "startCheck", exit: "cancelCheck" }
              },
              on: {
                HEALTH_REPORT: [
                  { guard: "reportFast", target: ".idle", actions: "checkSucceeded" },
                  { guard: "reportSlow", target: "warning", actions: "checkSucceeded" },
                  { target: "warning", actions: "checkFailed" }
                ]
              }
            },
            warning: {
              tags: ["warning"],
              entry: { type: "enterStatus", params: { status: "warning" } },
              initial: "idle",
              states: {
                idle: { after: { warningInterval: "checking" } },
                checking: { entry: "startCheck", exit: "cancelCheck" }
              },
              on: {
                HEALTH_REPORT: [
                  { guard: "reportFast", target: "healthy", actions: "checkSucceeded" },
                  { guard: "reportSlow", target: ".idle", actions: "checkSucceeded" },
                  { guard: "failureThresholdReached", target: "#service.lost", actions: "checkFailed" },
                  { target: ".idle", actions: "checkFailed" }
                ]
              }
            }
          }
        },
        tools: listRefresh({ list: "listTools", interval: "toolsRefresh", changed: "TOOLS_CHANGED", enabled: "toolsUpdateEnabled", requested: undefined, listed: "toolsListed", failed: "toolsListFailed" }),
        /** Resources, templates and prompts: refreshed as tools are, only from a server that offers them. */
        catalog: listRefresh({
          list: "listCatalog",
          interval: "catalogRefresh",
          changed: "CATALOG_CHANGED",
          enabled: "catalogUpdateEnabled",
          requested: "offersCatalog",
          listed: "catalogListed",
          failed: "catalogListFailed"
        })
      }
    },
    reconnecting: {
      tags: ["reconnecting"],
      entry: [{ type: "enterStatus", params: { status: "reconnecting" } }, "dropConnection"],
      initial: "waiting",
      states: {
        waiting: {
          entry: "scheduleReconnect",
          after: { nextDelay: "attempting" }
        },
        attempting: {
          invoke: {
            src: "connect",
            input: connectInput,
            onDone: { target: "#service.connected", actions: "connected" },
            onError: [
              { guard: "authorizationRequired", target: "#service.awaitingAuthorization", actions: "connectFailed" },
              { guard: "permanentFailure", target: "#service.unreachable", actions: ["connectFailed", "attemptFailed"] },
              { guard: "attemptsExhausted", target: "#service.unreachable", actions: ["connectFailed", "attemptFailed"] },
              { target: "waiting", reenter: true, actions: ["connectFailed", "attemptFailed"] }
            ]
          },
          after: {
            initializationTimeout: [
              { guard: "attemptsExhausted", target: "#service.unreachable", actions: ["connectFailed", "attemptFailed"] },
              { target: "waiting", reenter: true, actions: ["connectFailed", "attemptFailed"] }
            ]
          }
        }
      }
    },
    unreachable: {
      tags: ["unreachable"],
      entry: [{ type: "enterStatus", params: { status: "unreachable" } }, "dropConnection"],
      initial: "waiting",
      states: {
        waiting: {
          entry: "scheduleUnreachableRetry",
          after: { unreachableRetry: { guard: "reconnectionEnabled", target: "attempting" } }
        },
        attempting: {
          invoke: {
            src: "connect",
            input: connectInput,
            onDone: { target: "#service.connected", actions: "connected" },
            onError: [
              { guard: "authorizationRequired", target: "#service.awaitingAuthorization", actions: "connectFailed" },
              { target: "waiting", reenter: true, actions: "connectFailed" }
            ]
          },
          after: { initializationTimeout: { target: "waiting", reenter: true, actions: "connectFailed" } }
        }
      }
    },
    /**
     * The upstream requires an OAuth authorization that only a user can give: unreachable, with no
     * health check or reconnection (no timer at all) until AUTHORIZED, RESTART or a new definition.
     */
    awaitingAuthorization: {
      tags: ["unreachable"],
      entry: [
        { type: "enterStatus", params: { status: "unreachable" } },
        "dropConnection",
        assign(({ context }) => ({ nextRetryAt: undefined, hint: context.hint ?? AUTHORIZE_HINT }))
      ],
      on: {
        AUTH_REQUIRED: {},
        AUTHORIZED: { target: "initializing", actions: [{ type: "because", params: { reason: "authorized" } }, "resetCounters"] }
      }
    },
    disconnecting: {
      tags: ["disconnecting"],
      entry: { type: "enterStatus", params: { status: "disconnecting" } },
      on: { DISCONNECT: {}, UPDATE_DEFINITION: { guard: "definitionDisabled", actions: "newDefinition" } },
      invoke: {
        src: "closeConnection",
        input: ({ context }) => ({ connection: context.connection }),
        onDone: { target: "disconnected", actions: { type: "because", params: { reason: "transport closed" } } },
        onError: { target: "disconnected", actions: { type: "because", params: { reason: "transport closed with an error" } } }
      },
      after: {
        disconnectionTimeout: {
          target: "disconnected",
          actions: { type: "because", params: { reason: "disconnection timed out: closed by force" } }
        }
      }
    },
    disconnected: {
      tags: ["disconnected"],
      entry: [{ type: "enterStatus", params: { status: "disconnected" } }, "dropConnection", "resetCounters"],
      on: { DISCONNECT: {}, UPDATE_DEFINITION: { guard: "definitionDisabled", actions: "newDefinition" } }
    }
  }
})

/** Placeholders that fail loudly when the runtime forgot to provide an implementation. */
function fromPlaceholderPromise<O, I>(name: string) {
  return fromPromise<O, I>(async () => {
    throw new Error(`service machine: actor '${name}' was not provided`)
  })
}
function fromPlaceholderCallback<I, E extends EventObject>(name: string) {
  return fromCallback<E, I>(() => {
    throw new Error(`service machine: actor '${name}' was not provided`)
  })
}

export type ServiceMachine = typeof serviceMachine
export type ServiceActorRef = ActorRefFrom<typeof serviceMachine>
export type ServiceSnapshot = SnapshotFrom<typeof serviceMachine>

/** The status of a service snapshot: the tag of its active state. */
export const statusOf = (snapshot: Pick<ServiceSnapshot, "hasTag" | "status">): Status => {
  for (const s of STATUSES) if (snapshot.hasTag(s)) return s
  // Only the transient start state has no tag; it is never observable from outside.
  return snapshot.status === "active" ? "initializing" : "disconnected"
}
