/**
 * The store's parts (connections, pooled per-user connections, the actor system, followed tasks,
 * held calls, approvals, asynchronous calls, the lifecycle log, the inspection and progress
 * listeners, the cap on waits, the tool-search index), each an Effect service whose layer acquires
 * it, with its release when it holds anything. The layers are chained in `StorePartsLive` so that
 * the release order is the one a stopping store needs: what depends on a part, or must end before
 * it, is acquired after it and so released before it.
 */
import { dirname } from "node:path"
import { Context, Effect, Layer, type Scope as EffectScope } from "effect"
import { createActor, type InspectionEvent } from "xstate"
import type { Scope } from "../domain/service-definition.js"
import { DEFAULT_PIN_SETTINGS } from "../domain/pin-rules.js"
import { agentMachine } from "../machines/agent.js"
import { storeMachine, type StoreActorRef } from "../machines/root.js"
import { STORE_SYSTEM_ID } from "../machines/supervisor.js"
import { oauthFetch } from "../mcp/oauth-client.js"
import { DEFAULT_CLIENT_NAME } from "../mcp/connect.js"
import { STORE_STOPPING } from "../mcp/types.js"
import { UpstreamPolicy } from "../mcp/upstream-policy.js"
import { ConnectionRegistry, liveServiceMachine, logCrash, openPrincipalConnection } from "./adapter.js"
import { Approvals } from "./approvals.js"
import { AsyncCalls } from "./async-calls.js"
import { Waiters } from "./bridge.js"
import { HeldCalls } from "./input-required.js"
import { LifecycleLog } from "./lifecycle-log.js"
import { ProgressEvents } from "./progress.js"
import { serviceActorOf, serviceActorsOf } from "./service-actors.js"
import { AsyncResults, Credentials, Definitions, Pins, Processes, Records, Replication, StoreConfig, Tokens } from "./services.js"
import { TaskRelays } from "./task-relay.js"
import { ToolPins } from "./tool-pins.js"
import { ToolSearchIndex } from "./tool-search.js"
import { OAuthManager } from "./upstream-oauth.js"
import { UserCredentials } from "./user-credentials.js"

/** Every XState inspection event of the store's actor system, handed to its listeners. */
export interface InspectionHub {
  /** The listeners (`/inspect/events`, the lifecycle log); cleared when the store is released. */
  readonly listeners: Set<(event: InspectionEvent) => void>
  /** The actor system's `inspect` option. */
  readonly inspect: (event: InspectionEvent) => void
}

/** The inspection of the store's actors: listeners, the options' `inspect`, the replication told of added services. */
export class InspectionService extends Context.Tag("mcp-store/Inspection")<InspectionService, InspectionHub>() {}

/** Every MCP connection the store has open (local process trees included). */
export class ConnectionsService extends Context.Tag("mcp-store/Connections")<ConnectionsService, ConnectionRegistry>() {}

/** Per-user credentials of `per_user` services and the connections opened with them. */
export class UserCredentialsService extends Context.Tag("mcp-store/UserCredentials")<UserCredentialsService, UserCredentials>() {}

/** The pinned tool definitions: every tool list judged against them (undefined: a store built without pins). */
export class ToolPinsService extends Context.Tag("mcp-store/ToolPins")<ToolPinsService, ToolPins | undefined>() {}

/** The actor system (created, started by the store) and the OAuth of upstreams that tells its service actors. */
export interface ActorSystem {
  /** The root actor: owns the store's services and every agent. */
  readonly root: StoreActorRef
  /** OAuth of upstream services: tokens (encrypted at rest) and authorizations under way. */
  readonly oauth: OAuthManager
  /** The store's OAuth callback URL (`<base>/oauth/callback`), set by the HTTP server once it listens. */
  callbackUrl: string | undefined
}

/** The store's actors and the upstream OAuth that reaches them. */
export class ActorSystemService extends Context.Tag("mcp-store/ActorSystem")<ActorSystemService, ActorSystem>() {}

/** Upstream tasks MCP clients follow through the store, until their calls are recorded. */
export class TaskRelaysService extends Context.Tag("mcp-store/TaskRelays")<TaskRelaysService, TaskRelays>() {}

/** Calls whose callers answer their servers' requests for input in rounds. */
export class HeldCallsService extends Context.Tag("mcp-store/HeldCalls")<HeldCallsService, HeldCalls>() {}

/** Calls waiting for a person's approval. */
export class ApprovalsService extends Context.Tag("mcp-store/Approvals")<ApprovalsService, Approvals>() {}

/** Asynchronous calls: run detached, their answers kept. */
export class AsyncCallsService extends Context.Tag("mcp-store/AsyncCalls")<AsyncCallsService, AsyncCalls>() {}

/** The count of waits on services in progress (wait_service, add_service `?wait`, calls) and its cap. */
export class WaitersService extends Context.Tag("mcp-store/Waiters")<WaitersService, Waiters>() {}

/** Every call's progress, for the `/events` streams. */
export class ProgressEventsService extends Context.Tag("mcp-store/ProgressEvents")<ProgressEventsService, ProgressEvents>() {}

/** The full-text index of the scopes' tools, for search mode (src/runtime/tool-search.ts). */
export class ToolSearchService extends Context.Tag("mcp-store/ToolSearch")<ToolSearchService, ToolSearchIndex>() {}

/** The services' status changes as log lines. */
export class LifecycleLogService extends Context.Tag("mcp-store/LifecycleLog")<LifecycleLogService, LifecycleLog>() {}

/**
 * The inspection hub: each event goes to the replication (a service added, once its actor exists,
 * replica mode), the listeners, then the options' `inspect`. Its listeners are cleared last of all.
 */
const acquireInspection: Effect.Effect<InspectionService["Type"], never, StoreConfig | Replication | EffectScope.Scope> = Effect.gen(function* () {
  const { options } = yield* StoreConfig
  const replication = yield* Replication
  const listeners = new Set<(event: InspectionEvent) => void>()
  const user = options.inspect
  const tellAdded = (event: InspectionEvent): void => {
    if (!replication.shared || event.type !== "@xstate.event" || event.event.type !== "ADD_SERVICE") return
    const added = event.event as unknown as { scope?: Scope; name: string }
    const scope = added.scope
    if (scope !== undefined) queueMicrotask(() => replication.added(scope, added.name))
  }
  const inspect = (event: InspectionEvent): void => {
    tellAdded(event)
    for (const listener of listeners) listener(event)
    if (typeof user === "function") user(event)
    else user?.next?.(event)
  }
  return yield* Effect.acquireRelease(
    Effect.succeed({ listeners, inspect }),
    (hub) => Effect.sync(() => hub.listeners.clear())
  )
})
export const InspectionLive: Layer.Layer<InspectionService, never, StoreConfig | Replication> = Layer.scoped(InspectionService, acquireInspection)

/** The listeners of every call's progress (the `/events` streams); cleared on release. */
const acquireProgressEvents: Effect.Effect<ProgressEventsService["Type"], never, EffectScope.Scope> = Effect.acquireRelease(
  Effect.sync(() => new ProgressEvents()),
  (progress) => Effect.sync(() => progress.clear())
)
export const ProgressEventsLive: Layer.Layer<ProgressEventsService> = Layer.scoped(ProgressEventsService, acquireProgressEvents)

/**
 * The cap on waits (`maxWaiters`). Nothing to release: a wait holds its place only while its fiber
 * runs, and every wait ends when its actor stops or its caller goes away.
 */
const acquireWaiters: Effect.Effect<WaitersService["Type"], never, StoreConfig> = Effect.map(StoreConfig, ({ limits }) => new Waiters(limits.maxWaiters))
export const WaitersLive: Layer.Layer<WaitersService, never, StoreConfig> = Layer.effect(WaitersService, acquireWaiters)

/**
 * The tool-search index over the actor system's services (synced when a query comes, no timer):
 * nothing to release, its memory goes with the store.
 */
const acquireToolSearch: Effect.Effect<ToolSearchService["Type"], never, ActorSystemService> = Effect.map(ActorSystemService, ({ root }) => new ToolSearchIndex({ serviceActors: (scope) => serviceActorsOf(root, scope) }))
export const ToolSearchLive: Layer.Layer<ToolSearchService, never, ActorSystemService> = Layer.effect(ToolSearchService, acquireToolSearch)

/** The connections the store opens, under the outbound policy; every one still open closed on release. */
const acquireConnections: Effect.Effect<ConnectionsService["Type"], never, StoreConfig | Definitions | Processes | EffectScope.Scope> = Effect.gen(function* () {
  const { limits } = yield* StoreConfig
  const definitions = yield* Definitions
  const processes = yield* Processes
  const upstream = new UpstreamPolicy({ allow: limits.upstreamAllow, allowMetadata: limits.upstreamAllowMetadata })
  return yield* Effect.acquireRelease(
    Effect.sync(() => new ConnectionRegistry({ maxMessageBytes: limits.maxMessageBytes, servicesDir: dirname(definitions.path), upstream, processes })),
    (connections) => Effect.promise(() => connections.closeAll())
  )
})
export const ConnectionsLive: Layer.Layer<ConnectionsService, never, StoreConfig | Definitions | Processes> = Layer.scoped(ConnectionsService, acquireConnections)

/**
 * The per-user credentials on their backend (the file beside the services file, or the cluster's
 * Redis: the `Credentials` layer) and their pooled connections, bounded by the options; each pooled
 * connection closed on release, before the connections registry closes the rest.
 */
const acquireUserCredentials: Effect.Effect<UserCredentialsService["Type"], never, StoreConfig | Credentials | ConnectionsService | ActorSystemService | EffectScope.Scope> = Effect.gen(function* () {
  const { options, limits } = yield* StoreConfig
  const credentials = yield* Credentials
  const connections = yield* ConnectionsService
  // The principals' own upstream OAuth tokens (`per_user.oauth`) are the OAuth manager's.
  const { oauth } = yield* ActorSystemService
  return yield* Effect.acquireRelease(
    Effect.sync(
      () =>
        new UserCredentials(
          Promise.resolve(credentials),
          (target, values, timeoutMs, signal, principal) =>
            openPrincipalConnection(connections, target, values, { clientName: options.clientName ?? DEFAULT_CLIENT_NAME, timeoutMs, signal, oauth: { manager: oauth, principal } }),
          (connection) => connections.close(connection),
          { maxConnections: limits.perUserConnections, idleMs: limits.perUserIdleSeconds * 1000 },
          oauth
        )
    ),
    (credentials) => Effect.promise(() => credentials.closeAll())
  )
})
export const UserCredentialsLive: Layer.Layer<UserCredentialsService, never, StoreConfig | Credentials | ConnectionsService | ActorSystemService> = Layer.scoped(UserCredentialsService, acquireUserCredentials)

/** The pinned tool definitions on their backend, judged with the options' settings (nothing to release). */
const acquireToolPins: Effect.Effect<ToolPinsService["Type"], never, StoreConfig | Pins> = Effect.gen(function* () {
  const { options } = yield* StoreConfig
  const pins = yield* Pins
  return new ToolPins(pins, options.pinTools ?? DEFAULT_PIN_SETTINGS)
})
export const ToolPinsLive: Layer.Layer<ToolPinsService, never, StoreConfig | Pins> = Layer.effect(ToolPinsService, acquireToolPins)

/**
 * The actor system, created (the store starts it once every part is acquired) on the live service
 * machine, or the replicated one in replica mode; every actor stopped on release.
 */
const acquireActorSystem: Effect.Effect<ActorSystemService["Type"], never, StoreConfig | Tokens | Replication | ConnectionsService | ToolPinsService | InspectionService | EffectScope.Scope> = Effect.gen(function* () {
  const { options, settings } = yield* StoreConfig
  const tokens = yield* Tokens
  const replication = yield* Replication
  const connections = yield* ConnectionsService
  const pins = yield* ToolPinsService
  const inspection = yield* InspectionService
  const acquire = Effect.sync((): ActorSystem => {
    // The OAuth manager tells the service actors of this system (looked up once the root exists)
    // and reads the callback URL the HTTP server sets once it listens: both called after this returns.
    const oauth = new OAuthManager(
      tokens,
      (scope, name) => serviceActorOf(system.root, scope, name),
      () => system.callbackUrl,
      oauthFetch(connections.options.upstream ?? new UpstreamPolicy())
    )
    // Replica mode: each service is a replicated actor, running the live machine only while this replica owns it.
    const service = replication.serviceMachine(liveServiceMachine(connections, options.clientName, oauth, pins))
    const machine = storeMachine.provide({
      actors: { service, agent: agentMachine.provide({ actors: { service }, actions: { reportCrash: logCrash } }) },
      actions: { reportCrash: logCrash }
    })
    const system: ActorSystem = {
      root: createActor(machine, { input: { settings }, systemId: STORE_SYSTEM_ID, inspect: inspection.inspect }),
      oauth,
      callbackUrl: undefined
    }
    return system
  })
  return yield* Effect.acquireRelease(acquire, (system) => Effect.sync(() => system.root.stop()))
})
export const ActorSystemLive: Layer.Layer<ActorSystemService, never, StoreConfig | Tokens | Replication | ConnectionsService | ToolPinsService | InspectionService> = Layer.scoped(ActorSystemService, acquireActorSystem)

/** The tasks clients follow; on release, each recorded `interrupted` (their handles stay valid). */
const acquireTaskRelays: Effect.Effect<TaskRelaysService["Type"], never, Records | EffectScope.Scope> = Effect.flatMap(Records, (records) =>
  Effect.acquireRelease(
    Effect.sync(() => new TaskRelays(records)),
    (tasks) => Effect.sync(() => tasks.close())
  )
)
export const TaskRelaysLive: Layer.Layer<TaskRelaysService, never, Records> = Layer.scoped(TaskRelaysService, acquireTaskRelays)

/** The calls held for their callers' input (capped by `maxHeldCalls`); on release, each ends. */
const acquireHeldCalls: Effect.Effect<HeldCallsService["Type"], never, StoreConfig | Replication | EffectScope.Scope> = Effect.gen(function* () {
  const { limits } = yield* StoreConfig
  const replication = yield* Replication
  return yield* Effect.acquireRelease(
    Effect.sync(() => new HeldCalls(limits.maxHeldCalls, replication.held)),
    (held) => Effect.sync(() => held.close())
  )
})
export const HeldCallsLive: Layer.Layer<HeldCallsService, never, StoreConfig | Replication> = Layer.scoped(HeldCallsService, acquireHeldCalls)

/** The approvals (shared by the replicas in replica mode); on release, the calls waiting stop waiting. */
const acquireApprovals: Effect.Effect<ApprovalsService["Type"], never, StoreConfig | Replication | EffectScope.Scope> = Effect.gen(function* () {
  const { limits } = yield* StoreConfig
  const replication = yield* Replication
  return yield* Effect.acquireRelease(
    Effect.sync(() => new Approvals({ max: limits.maxApprovals, perKey: limits.maxApprovalsPerKey }, replication.approvals)),
    (approvals) => Effect.sync(() => approvals.close(STORE_STOPPING))
  )
})
export const ApprovalsLive: Layer.Layer<ApprovalsService, never, StoreConfig | Replication> = Layer.scoped(ApprovalsService, acquireApprovals)

/**
 * The asynchronous calls on their backend; on release, the calls running are kept `interrupted`
 * (or, following an upstream task, left to the next start), then cancelled.
 */
const acquireAsyncCalls: Effect.Effect<AsyncCallsService["Type"], never, StoreConfig | AsyncResults | Records | Replication | EffectScope.Scope> = Effect.gen(function* () {
  const { limits } = yield* StoreConfig
  const results = yield* AsyncResults
  const records = yield* Records
  const replication = yield* Replication
  return yield* Effect.acquireRelease(
    Effect.sync(() => new AsyncCalls(results, records, limits.maxAsyncCalls, replication.shared ? replication : undefined)),
    (calls) => Effect.promise(() => calls.close())
  )
})
export const AsyncCallsLive: Layer.Layer<AsyncCallsService, never, StoreConfig | AsyncResults | Records | Replication> = Layer.scoped(AsyncCallsService, acquireAsyncCalls)

/**
 * The lifecycle log, listening to the actor system before it starts; stopped on release, first of
 * the parts, so that the stopping actors' last changes are the shutdown's, not news.
 */
const acquireLifecycleLog: Effect.Effect<LifecycleLogService["Type"], never, InspectionService | EffectScope.Scope> = Effect.flatMap(InspectionService, (inspection) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const lifecycle = new LifecycleLog()
      inspection.listeners.add(lifecycle.inspect)
      return lifecycle
    }),
    (lifecycle) => Effect.sync(() => lifecycle.stop())
  )
)
export const LifecycleLogLive: Layer.Layer<LifecycleLogService, never, InspectionService> = Layer.scoped(LifecycleLogService, acquireLifecycleLog)

/** Every part of the store. */
export type StorePartServices =
  | InspectionService
  | ConnectionsService
  | UserCredentialsService
  | ToolPinsService
  | ActorSystemService
  | TaskRelaysService
  | HeldCallsService
  | ApprovalsService
  | AsyncCallsService
  | LifecycleLogService
  | WaitersService
  | ProgressEventsService
  | ToolSearchService

/**
 * The parts, acquired in this order and released in the reverse one: the lifecycle log stopped,
 * the asynchronous calls kept interrupted then cancelled, the approvals, held calls and followed
 * tasks closed, the per-user connections closed (they take their OAuth tokens from the actor
 * system's OAuth manager, so they are acquired after it), the actors stopped, every other
 * connection closed, the progress listeners cleared (after every call has ended), the inspection
 * listeners cleared. The cap on waits and the tool-search index hold nothing to release.
 */
export const StorePartsLive: Layer.Layer<StorePartServices, never, StoreConfig | Definitions | Records | AsyncResults | Tokens | Pins | Credentials | Replication | Processes> = Layer.scopedContext(
  // One layer whose parts are acquired in turn in its scope (each release added as its part is
  // acquired, so run in the reverse order, as a chain of one layer per part would release them):
  // building a chain of layers costs Effect tens of times more than the parts themselves do.
  Effect.gen(function* () {
    let parts = Context.empty() as Context.Context<StorePartServices>
    const acquire = <I extends StorePartServices, S>(tag: Context.Tag<I, S>, part: Effect.Effect<S, never, StorePartsNeeds>) =>
      Effect.map(
        Effect.mapInputContext(part, (outer: Context.Context<Exclude<StorePartsNeeds, StorePartServices>>) => Context.merge(outer, parts)),
        (service) => void (parts = Context.add(parts, tag, service))
      )
    yield* acquire(InspectionService, acquireInspection)
    yield* acquire(ProgressEventsService, acquireProgressEvents)
    yield* acquire(WaitersService, acquireWaiters)
    yield* acquire(ConnectionsService, acquireConnections)
    yield* acquire(ToolPinsService, acquireToolPins)
    yield* acquire(ActorSystemService, acquireActorSystem)
    yield* acquire(ToolSearchService, acquireToolSearch)
    yield* acquire(UserCredentialsService, acquireUserCredentials)
    yield* acquire(TaskRelaysService, acquireTaskRelays)
    yield* acquire(HeldCallsService, acquireHeldCalls)
    yield* acquire(ApprovalsService, acquireApprovals)
    yield* acquire(AsyncCallsService, acquireAsyncCalls)
    yield* acquire(LifecycleLogService, acquireLifecycleLog)
    return parts
  })
)

/** What the parts' acquisitions read: the store's capabilities, the parts acquired before them, the scope their releases go to. */
type StorePartsNeeds = StoreConfig | Definitions | Records | AsyncResults | Tokens | Pins | Credentials | Replication | Processes | StorePartServices | EffectScope.Scope
