/**
 * The store: the actor system (store, agent and service actors) and its parts (connections,
 * approvals, held and asynchronous calls...: src/runtime/store-parts.ts) on the store's capabilities
 * (the definitions, the records, the OAuth tokens, the replication: src/runtime/services.ts). It is
 * the `StoreService` of the layer graph (src/composition/layer-graph.ts builds it, with
 * `createStore` for the library); each part is acquired and released by its own layer, the store
 * only starts the actors, loads and reloads the definitions and, on release, ends the change under
 * way first. It hands out the scopes; their operations reach the parts through the host built on
 * them (src/runtime/store-host.ts), not through this class.
 *
 * Every change is written to the definitions (the services file, or the cluster's Redis:
 * docs/replicas.md) before the operation resolves, and changes are serialized so the definitions
 * and the actors always agree.
 */
import type { Tracer } from "../logging/tracing.js"
import { Context, Effect } from "effect"
import type { InspectionEvent } from "xstate"
import type { AgentActorRef } from "../machines/agent.js"
import type { StoreActorRef } from "../machines/root.js"
import { ownEntry } from "../machines/supervisor.js"
import { connectionLabel, type ConnectionRegistry } from "./adapter.js"
import { parseServiceField, serviceField } from "../domain/replicas.js"
import { STORE_SCOPE, agentIdProblem, agentScope, resolveDefinition, sameDefinition, type Scope, type ServiceDefinition } from "../domain/service-definition.js"
import type { MonitoringSettings } from "../domain/settings.js"
import { describeProblem, type EntryProblem, type ServicesConfig } from "../config/services-file.js"
import type { StoreLimits } from "../config/options.js"
import type { DefinitionsStore } from "../config/definitions-store.js"
import type { ReplicatedActorRef } from "../machines/replicated.js"
import { statusOf, type ServiceActorRef } from "../machines/service.js"
import type { AsyncCalls } from "./async-calls.js"
import type { RecordsBackend } from "../records/tool-records.js"
import type { Waiters } from "./bridge.js"
import { ValidationError } from "../domain/errors.js"
import { ScopeContext } from "./host.js"
import type { ProgressEvents } from "./progress.js"
import type { TaskRelays } from "./task-relay.js"
import type { HeldCalls } from "./input-required.js"
import type { Approvals } from "./approvals.js"
import { runToPromise } from "./run.js"
import { ScopeApi } from "./scope.js"
import { log } from "../logging/log.js"
import { indexDelayedEvents } from "./timers.js"
import type { OAuthManager } from "./upstream-oauth.js"
import type { ToolPins } from "./tool-pins.js"
import type { UserCredentials } from "./user-credentials.js"
import type { ReplicaHost, ReplicationApi, StoreSettings } from "./services.js"
import type { ToolSearchIndex } from "./tool-search.js"
import type { ActorSystem, InspectionHub } from "./store-parts.js"
import type { PartsHost } from "./store-host.js"
import { agentActorOf, allServiceActorsOf, serviceActorOf } from "./service-actors.js"

export type { CreateStoreOptions } from "./services.js"

/** What the store is built on: the services of the layer graph, its parts acquired (src/runtime/store-parts.ts). */
export interface StoreParts {
  readonly config: StoreSettings
  /** The live definitions: the services file, or the cluster's Redis in replica mode. */
  readonly definitions: DefinitionsStore
  readonly records: RecordsBackend
  readonly replication: ReplicationApi
  /** Where spans go (`noTracer` when tracing is off). */
  readonly tracer: Tracer
  readonly inspection: InspectionHub
  readonly connections: ConnectionRegistry
  readonly credentials: UserCredentials
  readonly pins: ToolPins | undefined
  readonly system: ActorSystem
  readonly tasks: TaskRelays
  readonly held: HeldCalls
  readonly approvals: Approvals
  readonly asyncCalls: AsyncCalls
  readonly waiters: Waiters
  readonly progress: ProgressEvents
  readonly toolSearch: ToolSearchIndex
  /** The store as its scopes' operations see it, on these parts (src/runtime/store-host.ts). */
  readonly host: PartsHost
}

/** The store: actors, services file and operations. Create it with `createStore`. */
export { ScopeApi }

export class Store {
  private stopping: Promise<void> | undefined
  private releasing: Promise<void> | undefined
  /** Releases the layers the store was built on (set by its layer, then by `createStore` for the whole graph); `stop` calls it. */
  private releaseLayers: (() => Promise<void>) | undefined
  private unwatch: (() => void) | undefined
  private readonly cleanupTimer: NodeJS.Timeout
  /** Every call's progress, for the `/events` streams. */
  readonly progress: ProgressEvents
  /** Asynchronous calls (`"async": true`): run detached, their answers kept (src/runtime/async-calls.ts). */
  readonly asyncCalls: AsyncCalls
  /** Calls whose callers answer their servers' requests for input in rounds (capped by `maxHeldCalls`). */
  readonly held: HeldCalls
  /** Upstream tasks MCP clients follow through the store, until their calls are recorded (src/runtime/task-relay.ts). */
  readonly tasks: TaskRelays
  /** Calls waiting for a person's approval (a service's `require_approval`; src/runtime/approvals.ts). */
  readonly approvals: Approvals
  /** The full-text index of the scopes' tools, for search mode (src/runtime/tool-search.ts). */
  readonly toolSearch: ToolSearchIndex
  /** Waits on services in progress (wait_service, add_service `?wait`, calls), capped by `maxWaiters`. */
  readonly waiters: Waiters
  /** The live definitions: the services file, or the cluster's Redis in replica mode. */
  readonly file: DefinitionsStore
  /** The root actor: owns the store's services and every agent. */
  readonly actor: StoreActorRef
  /** Every MCP connection the store has open. */
  readonly connections: ConnectionRegistry
  /** Effective monitoring settings. */
  readonly settings: MonitoringSettings
  /** The tool-call records. */
  readonly records: RecordsBackend
  /** The store's caps. */
  readonly limits: StoreLimits
  /** OAuth of upstream services: tokens (encrypted at rest) and authorizations under way. */
  readonly oauth: OAuthManager
  /** How the services are shared with other replicas (nothing for one store on its file). */
  readonly replication: ReplicationApi
  /** Where the spans of calls and requests go (`noTracer`: tracing off). */
  readonly tracer: Tracer
  /** The pinned tool definitions: every tool list judged against them (src/runtime/tool-pins.ts). */
  readonly pins: ToolPins | undefined
  /** Per-user credentials of `per_user` services and the connections opened with them (src/runtime/user-credentials.ts). */
  readonly credentials: UserCredentials
  /** The store as its scopes' operations see it: the parts they reach, the lock of changes, the calls in progress (src/runtime/store-host.ts). */
  readonly host: PartsHost
  /** The actor system's inspection listeners (cleared by their layer's release). */
  private readonly inspectors: Set<(event: InspectionEvent) => void>
  private readonly system: ActorSystem

  private constructor(parts: StoreParts) {
    const { config, definitions, records, replication } = parts
    const { settings, limits } = config
    this.file = definitions
    this.records = records
    this.settings = settings
    this.limits = limits
    this.replication = replication
    this.tracer = parts.tracer
    this.waiters = parts.waiters
    this.progress = parts.progress
    this.toolSearch = parts.toolSearch
    this.host = parts.host
    this.held = parts.held
    this.tasks = parts.tasks
    this.approvals = parts.approvals
    this.asyncCalls = parts.asyncCalls
    this.connections = parts.connections
    this.system = parts.system
    this.oauth = parts.system.oauth
    this.pins = parts.pins
    this.credentials = parts.credentials
    this.actor = parts.system.root
    this.inspectors = parts.inspection.listeners
    // Retention is enforced at start (by the records' open) and every `cleanup_hours`.
    this.cleanupTimer = setInterval(() => void this.records.cleanup().catch(() => undefined), settings.cleanup_hours * 3_600_000)
    this.cleanupTimer.unref()
  }

  /** When the store started (epoch ms). */
  get startedAt(): number {
    return this.host.startedAt
  }

  /** Tool calls in progress. */
  get inFlightCalls(): number {
    return this.host.inFlightCalls
  }

  /** The store's OAuth callback URL (`<base>/oauth/callback`), set by the HTTP server once it listens. */
  get oauthCallbackUrl(): string | undefined {
    return this.system.callbackUrl
  }

  set oauthCallbackUrl(url: string | undefined) {
    this.system.callbackUrl = url
  }

  /**
   * Starts the actor system on `parts` and every service of the definitions. The replication is
   * attached by the caller (the store layer, src/runtime/store-layers.ts), which also owns `release`.
   */
  static start(parts: StoreParts): Store {
    const store = new Store(parts)
    indexDelayedEvents(store.actor.system)
    store.actor.start()
    store.load(store.file.read())
    // The asynchronous calls a previous run left running: recorded `interrupted`.
    void store.asyncCalls.recordInterrupted()
    return store
  }

  /** Starts every service of the file, up to `maxServices` (the rest are left out, with a warning). */
  private load(config: ServicesConfig): void {
    const skipped: string[] = []
    let count = 0
    const add = (scope: Scope, name: string, definition: ServiceDefinition) => {
      if (count >= this.limits.maxServices) {
        skipped.push(scope.kind === "store" ? name : `${scope.agentId}/${name}`)
        return
      }
      count += 1
      this.actor.send({ type: "ADD_SERVICE", scope, name, definition })
    }
    for (const [name, definition] of Object.entries(config.store)) add(STORE_SCOPE, name, definition)
    for (const [agentId, services] of Object.entries(config.agents)) {
      for (const [name, definition] of Object.entries(services)) add(agentScope(agentId), name, definition)
    }
    this.warnSkipped(skipped)
    this.reportProblems(this.file.problems())
  }

  /** The problem lines of the services file already logged: a reload logs only the new ones. */
  private reportedProblems = new Set<string>()

  /** Logs each entry of the services file that cannot be used as it is (once, until it changes). */
  private reportProblems(problems: ReadonlyArray<EntryProblem>): void {
    const lines = new Set<string>()
    for (const problem of problems) {
      const line = `services file ${this.file.path}: ${describeProblem(problem)}`
      lines.add(line)
      if (this.reportedProblems.has(line)) continue
      const fields = { event: "services_file_entry", file: this.file.path, at: problem.at, outcome: problem.outcome }
      if (problem.outcome === "note") log.info(line, fields)
      else log.warn(line, fields)
    }
    this.reportedProblems = lines
  }

  /** Logs the services of the file left out because the store holds `maxServices` already. */
  private warnSkipped(skipped: ReadonlyArray<string>): void {
    if (skipped.length === 0) return
    const shown = skipped.slice(0, 20).join(", ") + (skipped.length > 20 ? `, ... (${skipped.length - 20} more)` : "")
    log.warn(
      `the store holds at most ${this.limits.maxServices} services (max_services): ` +
        `${skipped.length} service(s) of ${this.file.path} not started: ${shown}`,
      { event: "services_skipped", max_services: this.limits.maxServices, skipped: skipped.length }
    )
  }

  /** Operations on the store scope (one object for the store's life). */
  forStore(): ScopeApi {
    this.storeApi ??= new ScopeApi(this.host, STORE_SCOPE)
    return this.storeApi
  }
  private storeApi: ScopeApi | undefined

  /** Operations on one agent's scope; the id is validated (400 when malformed). */
  forAgent(agentId: string): ScopeApi {
    const problem = agentIdProblem(agentId)
    if (problem) throw ValidationError.of([{ field: "agent_id", problem }])
    return new ScopeApi(this.host, agentScope(agentId))
  }

  /**
   * One agent's scope as the Effect operations take it; a malformed id fails with ValidationError
   * (400). Checked at once, so the scope is a plain success or failure (an Exit): the direct call
   * route (src/http/call-route.ts) reads it without running it.
   */
  agentContext(agentId: string): Effect.Effect<ScopeContext, ValidationError> {
    const problem = agentIdProblem(agentId)
    return problem ? Effect.fail(ValidationError.of([{ field: "agent_id", problem }])) : Effect.succeed(new ScopeContext(this.host, agentScope(agentId)))
  }

  /** The agent actor of an agent, if it has any service. */
  agentActor(agentId: string): AgentActorRef | undefined {
    return agentActorOf(this.actor, agentId)
  }

  /** Receives every XState inspection event of the actor system (for `/inspect/events`). */
  onInspect(listener: (event: InspectionEvent) => void): () => void {
    this.inspectors.add(listener)
    return () => this.inspectors.delete(listener)
  }

  /** Ids of the agents that have services. */
  agentIds(): ReadonlyArray<string> {
    return this.host.agentIds()
  }

  /** The service actors of a scope, by name (a null-prototype record). */
  serviceActors(scope: Scope): Readonly<Record<string, ServiceActorRef>> {
    return this.host.serviceActors(scope)
  }

  /** The service actor of a name in a scope, if registered. */
  serviceActor(scope: Scope, name: string): ServiceActorRef | undefined {
    return serviceActorOf(this.actor, scope, name)
  }

  /** Every service actor of every scope. */
  allServiceActors(): ReadonlyArray<ServiceActorRef> {
    return allServiceActorsOf(this.actor)
  }

  /**
   * Watches the services file and applies hand edits: new services are added, removed ones
   * stopped, changed ones reconnected; unchanged services are not touched. Each applied edit that
   * changed something is logged (`+added ~updated -removed`), and so is each refused one, with why.
   */
  watchFile(onApplied?: (summary: { added: string[]; updated: string[]; removed: string[] }) => void): void {
    this.unwatch?.()
    this.unwatch = this.file.watch(
      () => {
        void this.host.serialize(async () => {
          // The definitions as they are when this runs, not as announced: a command that held the lock
          // meanwhile may have written its change after the edit was read (applying the announced copy
          // would stop the service it had just added, or start the one it had just deleted).
          const summary = this.applyConfig(this.file.read())
          const changes = [...summary.added.map((n) => `+${n}`), ...summary.updated.map((n) => `~${n}`), ...summary.removed.map((n) => `-${n}`)]
          if (changes.length > 0) {
            const what = this.replication.shared ? "cluster definitions applied" : "services file reloaded"
            log.info(`${what}: ${changes.join(" ")}`, { event: "reload", file: this.file.path, ...summary })
          }
          onApplied?.(summary)
        })
      },
      (error) => log.warn(`services file reload refused: ${error.message}; the services keep running as they were`, { event: "reload_refused", file: this.file.path })
    )
  }

  private applyConfig(next: ServicesConfig) {
    const summary = { added: [] as string[], updated: [] as string[], removed: [] as string[] }
    const skipped: string[] = []
    const scopes: Array<[Scope, Readonly<Record<string, ServiceDefinition>>]> = [
      [STORE_SCOPE, next.store],
      ...Object.entries(next.agents).map(([id, s]): [Scope, Readonly<Record<string, ServiceDefinition>>] => [agentScope(id), s])
    ]
    for (const id of this.agentIds()) if (!Object.hasOwn(next.agents, id)) scopes.push([agentScope(id), {}])
    const labelIn = (scope: Scope) => (n: string) => (scope.kind === "store" ? n : `${scope.agentId}/${n}`)
    const problems = this.file.problems()
    this.reportProblems(problems)
    // An entry left out of the edit (not an object, given twice) does not stop its running service.
    const heldBack = new Set(problems.flatMap((p) => (p.outcome === "left out" && p.service !== undefined ? [labelIn(p.service.scope)(p.service.name)] : [])))
    // Removed services first: they make room under `maxServices` for the added ones.
    for (const [scope, wanted] of scopes) {
      for (const name of Object.keys(this.serviceActors(scope))) {
        if (!Object.hasOwn(wanted, name) && !heldBack.has(labelIn(scope)(name))) {
          void this.host.removeActor(scope, name)
          summary.removed.push(labelIn(scope)(name))
        }
      }
    }
    for (const [scope, wanted] of scopes) {
      const label = labelIn(scope)
      const current = this.serviceActors(scope)
      for (const [name, definition] of Object.entries(wanted)) {
        const actor = ownEntry(current, name)
        try {
          resolveDefinition(definition)
        } catch (e) {
          // A running service is not replaced by a definition that cannot connect (a half-done edit);
          // a new one is added, unreachable, so that list_services shows its problem.
          if (actor) {
            log.warn(`services file ${this.file.path}: the edit of ${label(name)} is not applied (${(e as Error).message}); it keeps running as it was`, {
              event: "reload_entry_refused",
              file: this.file.path,
              service: label(name)
            })
            continue
          }
        }
        if (!actor) {
          if (this.host.serviceCount() >= this.limits.maxServices) {
            skipped.push(label(name))
            continue
          }
          this.actor.send({ type: "ADD_SERVICE", scope, name, definition })
          summary.added.push(label(name))
          continue
        }
        const snapshot = actor.getSnapshot()
        const off = statusOf(snapshot) === "disconnected" || statusOf(snapshot) === "disconnecting"
        if (!sameDefinition(snapshot.context.definition, definition)) {
          actor.send({ type: "UPDATE_DEFINITION", definition })
          if (definition.disabled === true) actor.send({ type: "DISCONNECT", reason: "disabled in the services file" })
          summary.updated.push(label(name))
        } else if (definition.disabled === true && !off) {
          actor.send({ type: "DISCONNECT", reason: "disabled in the services file" })
          summary.updated.push(label(name))
        } else if (definition.disabled !== true && statusOf(snapshot) === "disconnected") {
          actor.send({ type: "RESTART", reason: "enabled in the services file", fromDefinitions: true })
          summary.updated.push(label(name))
        }
      }
    }
    this.warnSkipped(skipped)
    return summary
  }

  /** The store's actors as the replication sees them (replica mode). */
  replicaHost(): ReplicaHost {
    const face = (field: string) => {
      const service = parseServiceField(field)
      return service === undefined ? undefined : (this.serviceActor(service.scope, service.name) as unknown as ReplicatedActorRef | undefined)
    }
    return {
      fields: () => this.allServiceActors().map((a) => serviceField(a.getSnapshot().context.scope, a.getSnapshot().context.name)),
      face,
      drain: (field) => {
        const service = parseServiceField(field)
        return service === undefined ? Promise.resolve() : this.connections.drain(connectionLabel(service.scope, service.name))
      }
    }
  }

  /**
   * Backs the services file up (`<file>.bak`, or a unique name beside it when that is taken; never
   * through a symlink; mode 0600), empties it, and stops every service of every scope.
   */
  resetServicesFile(): Promise<{ readonly backup_path: string; readonly removed: number }> {
    return this.host.serialize(async () => {
      const backup = await this.file.backup()
      const names = [STORE_SCOPE, ...this.agentIds().map(agentScope)].flatMap((scope) =>
        Object.keys(this.serviceActors(scope)).map((name) => ({ scope, name }))
      )
      await this.file.update((draft) => draft.replaceDocument({ mcpServers: {} }))
      await Promise.all(names.map(({ scope, name }) => this.host.removeActor(scope, name)))
      return { backup_path: backup, removed: names.length }
    })
  }

  /** Every agent with its services and tool counts (list_all_agents). */
  listAgents() {
    return this.agentIds().map((agentId) => {
      const actors = Object.values(this.serviceActors(agentScope(agentId)))
      const snapshots = actors.map((a) => a.getSnapshot())
      const status_summary: Record<string, number> = {}
      for (const s of snapshots) status_summary[statusOf(s)] = (status_summary[statusOf(s)] ?? 0) + 1
      return {
        agent_id: agentId,
        service_count: snapshots.length,
        tool_count: snapshots.reduce((n, s) => n + s.context.tools.length, 0),
        status_summary,
        services: snapshots.map((s) => s.context.name)
      }
    })
  }

  /**
   * Stops the store: with `createStore`, every layer it was built on (the store and its parts, then
   * the tokens and records, then the cluster); otherwise (the server's layer graph releases the
   * rest) the store and its parts (src/runtime/store-parts.ts): actors and connections. Idempotent.
   */
  stop(): Promise<void> {
    this.stopping ??= this.releaseLayers?.() ?? this.release()
    return this.stopping
  }

  /** `stop` releases the layers with `release` (the store layer sets its own; `createStore` the whole graph's). */
  releaseWith(release: () => Promise<void>): void {
    this.releaseLayers = release
  }

  /**
   * The store layer's finalizer, run before its parts are released (they are, in the reverse order
   * of their layers): the reload watch and retention timer stopped, the change under way ended
   * first, then the replication told that this replica is leaving, so that no service is taken
   * over while it stops. Idempotent.
   */
  release(): Promise<void> {
    this.releasing ??= (async () => {
      this.unwatch?.()
      clearInterval(this.cleanupTimer)
      await runToPromise(this.host.serialized(Effect.void)) // the change under way, if any, ends first
      this.replication.leaving() // no service is taken over while this replica stops
    })()
    return this.releasing
  }

  /** True once `stop()` (or the store layer's release) was called. */
  get stopped(): boolean {
    return this.stopping !== undefined || this.releasing !== undefined
  }
}

/** The running store in the layer graph (src/runtime/store-layers.ts builds it). */
export class StoreService extends Context.Tag("mcp-store/Store")<StoreService, Store>() {}
