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
import type { StoreActorRef } from "../machines/root.js"
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

/** What the host is made of: the store's settings, capabilities and parts. */
interface HostParts {
  readonly settings: MonitoringSettings
  readonly limits: StoreLimits
  readonly file: DefinitionsStore
  readonly records: RecordsBackend
  readonly replication: ReplicationApi
  readonly tracer: Tracer
  readonly system: ActorSystem
  readonly connections: ConnectionRegistry
  readonly credentials: UserCredentials
  readonly pins: ToolPins | undefined
  readonly tasks: TaskRelays
  readonly approvals: Approvals
  readonly waiters: Waiters
  readonly progress: ProgressEvents
}

/** `StoreHost` on the store's parts (one per store: the `StoreHostService`). */
export class PartsHost implements StoreHost {
  /** When the store started (epoch ms). */
  readonly startedAt = Date.now()
  /** Tool calls in progress. */
  inFlightCalls = 0
  /** One change at a time (`serialized`). */
  private readonly lock = Effect.unsafeMakeSemaphore(1)
  readonly settings: MonitoringSettings
  readonly limits: StoreLimits
  readonly file: DefinitionsStore
  readonly records: RecordsBackend
  readonly replication: ReplicationApi
  readonly tracer: Tracer
  readonly actor: StoreActorRef
  readonly credentials: UserCredentials
  readonly pins: ToolPins | undefined
  readonly tasks: TaskRelays
  readonly approvals: Approvals
  readonly waiters: Waiters
  readonly progress: ProgressEvents
  private readonly system: ActorSystem
  private readonly connections: ConnectionRegistry

  constructor(parts: HostParts) {
    this.settings = parts.settings
    this.limits = parts.limits
    this.file = parts.file
    this.records = parts.records
    this.replication = parts.replication
    this.tracer = parts.tracer
    this.system = parts.system
    this.connections = parts.connections
    this.credentials = parts.credentials
    this.pins = parts.pins
    this.tasks = parts.tasks
    this.approvals = parts.approvals
    this.waiters = parts.waiters
    this.progress = parts.progress
    this.actor = parts.system.root
  }

  /**
   * Runs a change while no other change runs, so the file and the actors never disagree; a change
   * is never cut in half (uninterruptible once it runs).
   */
  serialized<A, E>(change: Effect.Effect<A, E>): Effect.Effect<A, E> {
    return Effect.uninterruptible(this.lock.withPermits(1)(change))
  }

  /** `serialized` for a change written as a Promise. */
  serialize<A>(task: () => Promise<A>): Promise<A> {
    return runToPromise(this.serialized(Effect.tryPromise({ try: task, catch: (e) => e })))
  }

  serviceActors(scope: Scope): Readonly<Record<string, ServiceActorRef>> {
    return serviceActorsOf(this.actor, scope)
  }

  /** Ids of the agents that have services. */
  agentIds(): ReadonlyArray<string> {
    return agentIdsOf(this.actor)
  }

  /** How many services there are, in the store and every agent (what `maxServices` caps). */
  serviceCount(): number {
    let n = Object.keys(this.serviceActors(STORE_SCOPE)).length
    for (const id of this.agentIds()) n += Object.keys(this.serviceActors(agentScope(id))).length
    return n
  }

  /** Stops a service actor and resolves when its connection (and process tree) is closed. */
  removeActor(scope: Scope, name: string): Promise<void> {
    const actor = serviceActorOf(this.actor, scope, name)
    if (!actor) return Promise.resolve()
    const connection = actor.getSnapshot().context.connection
    this.actor.send({ type: "REMOVE_SERVICE", scope, name })
    // Its OAuth tokens and registration go with it (never left behind in the token file), and its tool pins.
    void this.system.oauth.forget(scope, name)
    void this.pins?.forget(scope, name)
    void this.credentials.forget(scope, name)
    if (scope.kind === "agent" && Object.keys(this.serviceActors(scope)).length === 0) {
      this.actor.send({ type: "REMOVE_AGENT", agentId: scope.agentId })
    }
    const closed = this.connections.close(connection)
    // Replica mode: the owner gives its lease and view up once the connection is closed.
    return closed.then(() => this.replication.removed(scope, name))
  }

  /**
   * Removes every service of the scopes (`store` only, or `all`: the store and every agent) from the
   * services file and stops them. Resolves with how many were removed.
   */
  resetConfig(which: "store" | "all"): Promise<number> {
    return this.serialize(async () => {
      const scopes: Scope[] = [STORE_SCOPE, ...(which === "all" ? this.agentIds().map(agentScope) : [])]
      const names = scopes.flatMap((scope) => Object.keys(this.serviceActors(scope)).map((name) => ({ scope, name })))
      await this.file.update((draft) => {
        if (which === "all") draft.clearAll()
        else draft.clearStore()
      })
      await Promise.all(names.map(({ scope, name }) => this.removeActor(scope, name)))
      return names.length
    })
  }
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
    return new PartsHost({
      settings,
      limits,
      file: yield* Definitions,
      records: yield* Records,
      replication: yield* Replication,
      tracer: yield* Tracing,
      system: yield* ActorSystemService,
      connections: yield* ConnectionsService,
      credentials: yield* UserCredentialsService,
      pins: yield* ToolPinsService,
      tasks: yield* TaskRelaysService,
      approvals: yield* ApprovalsService,
      waiters: yield* WaitersService,
      progress: yield* ProgressEventsService
    })
  })
)
