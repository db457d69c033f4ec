/**
 * The store as the operations of its scopes see it (`StoreHost`, src/runtime/host.ts), built by a
 * layer from the parts it reaches, so the operations depend on those parts, not on the `Store`
 * class. Beside the parts it owns what the operations and the store share: the one lock of changes,
 * the count of calls in progress, the start time, and the removal of a service (its actor, its
 * connection, its tokens, pins and per-user credentials).
 */
import { Context, Effect, Layer } from "effect"
import type { DefinitionsStore } from "../config/definitions-store.js"
import type { StoreLimits } from "../config/options.js"
import { STORE_SCOPE, agentScope, type Scope } from "../domain/service-definition.js"
import type { MonitoringSettings } from "../domain/settings.js"
import type { Tracer } from "../logging/tracing.js"
import type { ServiceActorRef } from "../machines/service.js"
import type { RecordsBackend } from "../records/tool-records.js"
import type { ConnectionRegistry } from "./adapter.js"
import type { Approvals } from "./approvals.js"
import type { Waiters } from "./bridge.js"
import type { StoreHost } from "./host.js"
import type { ProgressEvents } from "./progress.js"
import { runToPromise } from "./run.js"
import { agentIdsOf, serviceActorOf, serviceActorsOf } from "./service-actors.js"
import { Definitions, Records, Replication, StoreConfig, Tracing, type ReplicationApi } from "./services.js"
import {
  ActorSystemService,
  ApprovalsService,
  ConnectionsService,
  ProgressEventsService,
  TaskRelaysService,
  ToolPinsService,
  UserCredentialsService,
  WaitersService,
  type ActorSystem
} from "./store-parts.js"
import type { TaskRelays } from "./task-relay.js"
import type { ToolPins } from "./tool-pins.js"
import type { UserCredentials } from "./user-credentials.js"

/** The parts the host hands to the operations as they are (the actors through `system.root`). */
interface HostParts {
  readonly settings: MonitoringSettings
  readonly limits: StoreLimits
  readonly file: DefinitionsStore
  readonly records: RecordsBackend
  readonly replication: ReplicationApi
  readonly tracer: Tracer
  readonly credentials: UserCredentials
  readonly pins: ToolPins | undefined
  readonly tasks: TaskRelays
  readonly approvals: Approvals
  readonly waiters: Waiters
  readonly progress: ProgressEvents
}

/** `StoreHost` on the store's parts (one per store: the `StoreHostService`), with what the store itself uses of it. */
export interface PartsHost extends StoreHost {
  /** `serialized` for a change written as a Promise. */
  serialize<A>(task: () => Promise<A>): Promise<A>
  /** Ids of the agents that have services. */
  agentIds(): ReadonlyArray<string>
}

/** The host on `parts`: its own are the lock of changes, the count of calls in progress and the start time. */
export const partsHost = (parts: HostParts, system: ActorSystem, connections: ConnectionRegistry): PartsHost => {
  const lock = Effect.unsafeMakeSemaphore(1)
  const root = system.root
  const host: PartsHost = {
    ...parts,
    startedAt: Date.now(),
    inFlightCalls: 0,
    actor: root,
    serialized: <A, E>(change: Effect.Effect<A, E>) => Effect.uninterruptible(lock.withPermits(1)(change)),
    serialize: <A>(task: () => Promise<A>) => runToPromise(host.serialized(Effect.tryPromise({ try: task, catch: (e) => e }))),
    serviceActors: (scope: Scope): Readonly<Record<string, ServiceActorRef>> => serviceActorsOf(root, scope),
    agentIds: () => agentIdsOf(root),
    serviceCount: () => {
      let n = Object.keys(host.serviceActors(STORE_SCOPE)).length
      for (const id of host.agentIds()) n += Object.keys(host.serviceActors(agentScope(id))).length
      return n
    },
    removeActor: (scope: Scope, name: string): Promise<void> => {
      const actor = serviceActorOf(root, scope, name)
      if (!actor) return Promise.resolve()
      const connection = actor.getSnapshot().context.connection
      root.send({ type: "REMOVE_SERVICE", scope, name })
      // Its OAuth tokens and registration go with it (never left behind in the token file), and its tool pins.
      void system.oauth.forget(scope, name)
      void parts.pins?.forget(scope, name)
      void parts.credentials.forget(scope, name)
      if (scope.kind === "agent" && Object.keys(host.serviceActors(scope)).length === 0) {
        root.send({ type: "REMOVE_AGENT", agentId: scope.agentId })
      }
      const closed = connections.close(connection)
      // Replica mode: the owner gives its lease and view up once the connection is closed.
      return closed.then(() => parts.replication.removed(scope, name))
    },
    resetConfig: (which: "store" | "all"): Promise<number> =>
      host.serialize(async () => {
        const scopes: Scope[] = [STORE_SCOPE, ...(which === "all" ? host.agentIds().map(agentScope) : [])]
        const names = scopes.flatMap((scope) => Object.keys(host.serviceActors(scope)).map((name) => ({ scope, name })))
        await parts.file.update((draft) => {
          if (which === "all") draft.clearAll()
          else draft.clearStore()
        })
        await Promise.all(names.map(({ scope, name }) => host.removeActor(scope, name)))
        return names.length
      })
  }
  return host
}

/** The store as its scopes' operations see it. */
export class StoreHostService extends Context.Tag("mcp-store/StoreHost")<StoreHostService, PartsHost>() {}

/** The host on the parts it reaches; it holds nothing to release (the store ends the change under way). */
export const StoreHostLive: Layer.Layer<
  StoreHostService,
  never,
  | StoreConfig
  | Definitions
  | Records
  | Replication
  | Tracing
  | ActorSystemService
  | ConnectionsService
  | UserCredentialsService
  | ToolPinsService
  | TaskRelaysService
  | ApprovalsService
  | WaitersService
  | ProgressEventsService
> = Layer.effect(
  StoreHostService,
  Effect.gen(function* () {
    const { settings, limits } = yield* StoreConfig
    const parts: HostParts = {
      settings,
      limits,
      file: yield* Definitions,
      records: yield* Records,
      replication: yield* Replication,
      tracer: yield* Tracing,
      credentials: yield* UserCredentialsService,
      pins: yield* ToolPinsService,
      tasks: yield* TaskRelaysService,
      approvals: yield* ApprovalsService,
      waiters: yield* WaitersService,
      progress: yield* ProgressEventsService
    }
    return partsHost(parts, yield* ActorSystemService, yield* ConnectionsService)
  })
)
