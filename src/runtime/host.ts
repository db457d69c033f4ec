/**
 * What the operations of a scope need from the store, as an interface: the scope's rooms (calls,
 * commands, queries) depend on this, not on the `Store` class. Its one implementation is built by a
 * layer from the store's parts (`PartsHost`, src/runtime/store-host.ts). `ScopeContext` is one scope
 * seen through it, with the service look-ups every room uses.
 */
import { Effect } from "effect"
import type { DefinitionsStore } from "../config/definitions-store.js"
import type { StoreLimits } from "../config/options.js"
import { clientId, scopeLabel, type Scope } from "../domain/service-definition.js"
import type { MonitoringSettings } from "../domain/settings.js"
import type { ServiceActorRef } from "../machines/service.js"
import type { StoreActorRef } from "../machines/root.js"
import { ownEntry } from "../machines/supervisor.js"
import type { RecordsBackend } from "../records/tool-records.js"
import type { ToolGate } from "../domain/tool-filter.js"
import type { Waiters } from "./bridge.js"
import type { ProgressEvents } from "./progress.js"
import { ServiceNotFound } from "../domain/errors.js"
import type { Tracer } from "../logging/tracing.js"
import type { TaskRelays } from "./task-relay.js"
import type { Approvals } from "./approvals.js"
import type { ToolPins } from "./tool-pins.js"
import type { UserCredentials } from "./user-credentials.js"

/** The store as its scopes see it (implemented on the store's parts by `PartsHost`). */
export interface StoreHost {
  /** When the store started (epoch ms). */
  readonly startedAt: number
  /** The live definitions: the services file, or the cluster's Redis in replica mode. */
  readonly file: DefinitionsStore
  /** The root actor: new services are added through it. */
  readonly actor: StoreActorRef
  readonly records: RecordsBackend
  readonly settings: MonitoringSettings
  readonly limits: StoreLimits
  /** The count of waits in progress, and its cap. */
  readonly waiters: Waiters
  /** Tool calls in progress. */
  inFlightCalls: number
  /** Every call's progress, for the `/events` streams. */
  readonly progress: ProgressEvents
  /** Where the spans of calls go (`noTracer`: tracing off, nothing built). */
  readonly tracer: Tracer
  /** Upstream tasks MCP clients follow through the store (src/runtime/task-relay.ts). */
  readonly tasks: TaskRelays
  /** Calls waiting for a person's approval (src/runtime/approvals.ts). */
  readonly approvals: Approvals
  /** The pinned tool definitions (src/runtime/tool-pins.ts); undefined: a store built without them. */
  readonly pins: ToolPins | undefined
  /** Per-user credentials of `per_user` services and their connections (src/runtime/user-credentials.ts); absent: none kept. */
  readonly credentials?: UserCredentials | undefined
  /** True when the definitions (and pins) are shared with other replicas (a failure to reach them is ClusterUnavailable). */
  readonly replication: { readonly shared: boolean }
  /**
   * Runs a change while no other change runs, so the file and the actors never disagree; a change
   * is never cut in half (uninterruptible once it runs).
   */
  serialized<A, E>(change: Effect.Effect<A, E>): Effect.Effect<A, E>
  /** The service actors of a scope, by name. */
  serviceActors(scope: Scope): Readonly<Record<string, ServiceActorRef>>
  /** Services across the store and every agent. */
  serviceCount(): number
  /** Stops a service actor; resolves when its connection (and process tree) is closed. */
  removeActor(scope: Scope, name: string): Promise<void>
  /** Removes every service of the store scope (`store`) or of every scope (`all`). */
  resetConfig(which: "store" | "all"): Promise<number>
}

/** One scope of the store, with the look-ups of its services. */
export class ScopeContext {
  /** `store`, or the agent's id. */
  readonly label: string

  constructor(
    readonly host: StoreHost,
    readonly scope: Scope,
    /**
     * The caller's tool allow-list (an agent key's `tools`, src/domain/tool-filter.ts): the tools
     * it lets through are all the scope lists and calls for this caller; undefined: no key list.
     */
    readonly gate?: ToolGate | undefined
  ) {
    this.label = scopeLabel(scope)
  }

  /** This scope for a caller with `gate` (this one when there is none). */
  gated(gate: ToolGate | undefined): ScopeContext {
    return gate === undefined ? this : new ScopeContext(this.host, this.scope, gate)
  }

  /** The service actors of this scope. */
  actors(): Readonly<Record<string, ServiceActorRef>> {
    return this.host.serviceActors(this.scope)
  }

  /** Finds a service by name, or by client_id (an exact name wins). */
  findService(nameOrClientId: string): ServiceActorRef | undefined {
    const actors = this.actors()
    const byName = ownEntry(actors, nameOrClientId)
    if (byName) return byName
    for (const [name, actor] of Object.entries(actors)) {
      if (clientId(this.scope, name, actor.getSnapshot().context.definition) === nameOrClientId) return actor
    }
    return undefined
  }

  /** Like `findService`, throwing ServiceNotFound. */
  requireService(nameOrClientId: string): ServiceActorRef {
    const actor = this.findService(nameOrClientId)
    if (!actor) throw ServiceNotFound.of(nameOrClientId, this.label, Object.keys(this.actors()))
    return actor
  }

  /** Like `findService`, failing with ServiceNotFound. */
  service(nameOrClientId: string): Effect.Effect<ServiceActorRef, ServiceNotFound> {
    return Effect.suspend(() => {
      const actor = this.findService(nameOrClientId)
      return actor ? Effect.succeed(actor) : Effect.fail(ServiceNotFound.of(nameOrClientId, this.label, Object.keys(this.actors())))
    })
  }
}
