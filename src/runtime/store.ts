/**
 * The store: the actor system (store, agent and service actors) on the store's capabilities (the
 * definitions, the records, the OAuth tokens, the replication: src/runtime/services.ts), and the
 * operations on them. It is the `StoreService` of the layer graph (src/composition/layer-graph.ts builds it, with
 * `createStore` for the library) and the only thing the HTTP handlers call: they decode, call a
 * `ScopeApi` operation, encode.
 *
 * Every change is written to the definitions (the services file, or the cluster's Redis:
 * docs/replicas.md) before the operation resolves, and changes are serialized so the definitions
 * and the actors always agree.
 */
import { noTracer, type Tracer } from "../logging/tracing.js"
import { dirname } from "node:path"
import { Context, Effect } from "effect"
import { createActor, type InspectionEvent } from "xstate"
import { dict } from "../domain/dict.js"
import { parseServiceField, serviceField } from "../domain/replicas.js"
import { STORE_SCOPE, agentIdProblem, agentScope, resolveDefinition, sameDefinition, type Scope, type ServiceDefinition } from "../domain/service-definition.js"
import type { MonitoringSettings } from "../domain/settings.js"
import { describeProblem, type EntryProblem, type ServicesConfig } from "../config/services-file.js"
import type { StoreLimits } from "../config/options.js"
import type { DefinitionsStore } from "../config/definitions-store.js"
import type { ReplicatedActorRef } from "../machines/replicated.js"
import { agentMachine, type AgentActorRef } from "../machines/agent.js"
import { statusOf, type ServiceActorRef } from "../machines/service.js"
import { storeMachine, type StoreActorRef } from "../machines/root.js"
import { STORE_SYSTEM_ID, ownEntry } from "../machines/supervisor.js"
import type { AsyncResultsBackend } from "../records/async-results.js"
import { AsyncCalls } from "./async-calls.js"
import type { RecordsBackend } from "../records/tool-records.js"
import { UpstreamPolicy } from "../mcp/upstream-policy.js"
import type { ProcessLedger } from "../mcp/types.js"
import { oauthFetch } from "../mcp/oauth-client.js"
import { ConnectionRegistry, connectionLabel, liveServiceMachine, logCrash, openPrincipalConnection } from "./adapter.js"
import { Waiters } from "./bridge.js"
import { ValidationError } from "../domain/errors.js"
import { ScopeContext, type StoreHost } from "./host.js"
import { ProgressEvents } from "./progress.js"
import { TaskRelays } from "./task-relay.js"
import { HeldCalls } from "./input-required.js"
import { Approvals } from "./approvals.js"
import { STORE_STOPPING } from "../mcp/types.js"
import { runToPromise } from "./run.js"
import { ScopeApi } from "./scope.js"
import { LifecycleLog } from "./lifecycle-log.js"
import { log } from "../logging/log.js"
import { indexDelayedEvents } from "./timers.js"
import { OAuthManager } from "./upstream-oauth.js"
import type { TokenStore } from "../config/token-vault.js"
import type { ToolPinsBackend } from "../config/pins-file.js"
import { DEFAULT_PIN_SETTINGS } from "../domain/pin-rules.js"
import { ToolPins } from "./tool-pins.js"
import { UserCredentials } from "./user-credentials.js"
import { CredentialsFile } from "../config/credentials-file.js"
import { DEFAULT_CLIENT_NAME } from "../mcp/connect.js"
import type { ReplicaHost, ReplicationApi, StoreSettings } from "./services.js"
import { ToolSearchIndex } from "./tool-search.js"

export type { CreateStoreOptions } from "./services.js"

/** What the store is built on: the services of the layer graph. */
export interface StoreParts {
  readonly config: StoreSettings
  /** The live definitions: the services file, or the cluster's Redis in replica mode. */
  readonly definitions: DefinitionsStore
  readonly records: RecordsBackend
  readonly asyncResults: AsyncResultsBackend
  readonly tokens: TokenStore
  /** The pinned tool definitions (docs/tool-pins.md); absent: kept in memory only (a store built by hand). */
  readonly pins?: ToolPinsBackend | undefined
  readonly replication: ReplicationApi
  /** Where spans go (`noTracer` when tracing is off); absent: off. */
  readonly tracer?: Tracer | undefined
  /** Where local services' process groups are noted (src/config/process-ledger.ts); absent: nowhere. */
  readonly processes?: ProcessLedger | undefined
}

/** The services of an agent that has none (a frozen null-prototype record, like the machines' own). */
const NO_SERVICES: Readonly<Record<string, ServiceActorRef>> = Object.freeze(dict<ServiceActorRef>())

/** The store: actors, services file and operations. Create it with `createStore`. */
export { ScopeApi }

export class Store implements StoreHost {
  /** When the store started (epoch ms). */
  readonly startedAt = Date.now()
  /** One change at a time (`serialized`). */
  private readonly lock = Effect.unsafeMakeSemaphore(1)
  private stopping: Promise<void> | undefined
  private shuttingDown: Promise<void> | undefined
  /** Releases the layers the store was built on (set by `createStore`); `stop` calls it. */
  private releaseLayers: (() => Promise<void>) | undefined
  private unwatch: (() => void) | undefined
  private readonly cleanupTimer: NodeJS.Timeout
  /** Tool calls in progress. */
  inFlightCalls = 0
  /** Every call's progress, for the `/events` streams. */
  readonly progress = new ProgressEvents()
  /** Asynchronous calls (`"async": true`): run detached, their answers kept (src/runtime/async-calls.ts). */
  readonly asyncCalls: AsyncCalls
  /** Calls whose callers answer their servers' requests for input in rounds (capped by `maxHeldCalls`). */
  readonly held: HeldCalls
  /** Upstream tasks MCP clients follow through the store, until their calls are recorded (src/runtime/task-relay.ts). */
  readonly tasks: TaskRelays
  /** Calls waiting for a person's approval (a service's `require_approval`; src/runtime/approvals.ts). */
  readonly approvals: Approvals
  /** The full-text index of the scopes' tools, for search mode (src/runtime/tool-search.ts). */
  readonly toolSearch: ToolSearchIndex = new ToolSearchIndex(this)
  /** The store's OAuth callback URL (`<base>/oauth/callback`), set by the HTTP server once it listens. */
  oauthCallbackUrl: string | undefined
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
  private readonly inspectors = new Set<(event: InspectionEvent) => void>()
  /** Status changes as log lines, watched from outside the machines. */
  private readonly lifecycle = new LifecycleLog()

  private constructor(parts: StoreParts) {
    const { config, definitions, records, tokens, replication } = parts
    const { settings, limits, options } = config
    this.file = definitions
    this.records = records
    this.settings = settings
    this.limits = limits
    this.replication = replication
    this.tracer = parts.tracer ?? noTracer
    this.waiters = new Waiters(limits.maxWaiters)
    this.held = new HeldCalls(limits.maxHeldCalls, replication.held)
    this.tasks = new TaskRelays(records)
    this.approvals = new Approvals({ max: limits.maxApprovals, perKey: limits.maxApprovalsPerKey }, replication.approvals)
    this.asyncCalls = new AsyncCalls(parts.asyncResults, records, limits.maxAsyncCalls, replication.shared ? replication : undefined)
    const upstream = new UpstreamPolicy({ allow: limits.upstreamAllow, allowMetadata: limits.upstreamAllowMetadata })
    this.connections = new ConnectionRegistry({ maxMessageBytes: limits.maxMessageBytes, servicesDir: dirname(definitions.path), upstream, processes: parts.processes })
    // OAuth of upstreams (src/runtime/upstream-oauth.ts): it tells the service actors of this store.
    this.oauth = new OAuthManager(tokens, (scope, name) => this.serviceActor(scope, name), () => this.oauthCallbackUrl, oauthFetch(upstream))
    // Replica mode: each service is a replicated actor, running the live machine only while this replica owns it.
    this.pins = parts.pins === undefined ? undefined : new ToolPins(parts.pins, options.pinTools ?? DEFAULT_PIN_SETTINGS)
    const service = replication.serviceMachine(liveServiceMachine(this.connections, options.clientName, this.oauth, this.pins))
    // Replica mode keeps none (a `per_user` call is refused there): the file is one store's.
    const connections = this.connections
    this.credentials = new UserCredentials(
      replication.shared ? Promise.resolve(CredentialsFile.inMemory()) : CredentialsFile.open(definitions.path),
      (target, values, timeoutMs, signal, principal) =>
        openPrincipalConnection(connections, target, values, { clientName: options.clientName ?? DEFAULT_CLIENT_NAME, timeoutMs, signal, oauth: { manager: this.oauth, principal } }),
      (connection) => connections.close(connection),
      undefined,
      this.oauth
    )
    const machine = storeMachine.provide({
      actors: { service, agent: agentMachine.provide({ actors: { service }, actions: { reportCrash: logCrash } }) },
      actions: { reportCrash: logCrash }
    })
    const user = options.inspect
    this.actor = createActor(machine, {
      input: { settings },
      systemId: STORE_SYSTEM_ID,
      inspect: (event: InspectionEvent) => {
        this.tellAdded(event)
        this.lifecycle.inspect(event)
        for (const listener of this.inspectors) listener(event)
        if (typeof user === "function") user(event)
        else user?.next?.(event)
      }
    })
    // Retention is enforced at start (by the records' open) and every `cleanup_hours`.
    this.cleanupTimer = setInterval(() => void this.records.cleanup().catch(() => undefined), settings.cleanup_hours * 3_600_000)
    this.cleanupTimer.unref()
  }

  /**
   * Starts the actor system on `parts` and every service of the definitions. The replication is
   * attached by the caller (the store layer, src/runtime/store-layers.ts), which also owns `shutdown`.
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

  /** Tells the replication of each service added to the store (the root's ADD_SERVICE names its scope), once the actor exists. */
  private tellAdded(event: InspectionEvent): void {
    if (!this.replication.shared || event.type !== "@xstate.event" || event.event.type !== "ADD_SERVICE") return
    const added = event.event as unknown as { scope?: Scope; name: string }
    const scope = added.scope
    if (scope !== undefined) queueMicrotask(() => this.replication.added(scope, added.name))
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
    this.storeApi ??= new ScopeApi(this, STORE_SCOPE)
    return this.storeApi
  }
  private storeApi: ScopeApi | undefined

  /** Operations on one agent's scope; the id is validated (400 when malformed). */
  forAgent(agentId: string): ScopeApi {
    const problem = agentIdProblem(agentId)
    if (problem) throw ValidationError.of([{ field: "agent_id", problem }])
    return new ScopeApi(this, agentScope(agentId))
  }

  /**
   * One agent's scope as the Effect operations take it; a malformed id fails with ValidationError
   * (400). Checked at once, so the scope is a plain success or failure (an Exit): the direct call
   * route (src/http/call-route.ts) reads it without running it.
   */
  agentContext(agentId: string): Effect.Effect<ScopeContext, ValidationError> {
    const problem = agentIdProblem(agentId)
    return problem ? Effect.fail(ValidationError.of([{ field: "agent_id", problem }])) : Effect.succeed(new ScopeContext(this, agentScope(agentId)))
  }

  /** The agent actor of an agent, if it has any service. */
  agentActor(agentId: string): AgentActorRef | undefined {
    return ownEntry(this.actor.getSnapshot().context.agents, agentId)
  }

  /** Receives every XState inspection event of the actor system (for `/inspect/events`). */
  onInspect(listener: (event: InspectionEvent) => void): () => void {
    this.inspectors.add(listener)
    return () => this.inspectors.delete(listener)
  }

  /** Ids of the agents that have services. */
  agentIds(): ReadonlyArray<string> {
    return Object.keys(this.actor.getSnapshot().context.agents)
  }

  /** The service actors of a scope, by name (a null-prototype record). */
  serviceActors(scope: Scope): Readonly<Record<string, ServiceActorRef>> {
    if (scope.kind === "store") return this.actor.getSnapshot().context.services
    return this.agentActor(scope.agentId)?.getSnapshot().context.services ?? NO_SERVICES
  }

  /** The service actor of a name in a scope, if registered. */
  serviceActor(scope: Scope, name: string): ServiceActorRef | undefined {
    return ownEntry(this.serviceActors(scope), name)
  }

  /** How many services there are, in the store and every agent (what `maxServices` caps). */
  serviceCount(): number {
    let n = Object.keys(this.serviceActors(STORE_SCOPE)).length
    for (const id of this.agentIds()) n += Object.keys(this.serviceActors(agentScope(id))).length
    return n
  }

  /** Every service actor of every scope. */
  allServiceActors(): ReadonlyArray<ServiceActorRef> {
    const out = [...Object.values(this.serviceActors(STORE_SCOPE))]
    for (const id of this.agentIds()) out.push(...Object.values(this.serviceActors(agentScope(id))))
    return out
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

  /**
   * Watches the services file and applies hand edits: new services are added, removed ones
   * stopped, changed ones reconnected; unchanged services are not touched. Each applied edit that
   * changed something is logged (`+added ~updated -removed`), and so is each refused one, with why.
   */
  watchFile(onApplied?: (summary: { added: string[]; updated: string[]; removed: string[] }) => void): void {
    this.unwatch?.()
    this.unwatch = this.file.watch(
      (next) => {
        void this.serialize(async () => {
          // Replica mode: the definitions as they are when this runs (a change made here meanwhile included).
          const summary = this.applyConfig(this.replication.shared ? this.file.read() : next)
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
          this.removeActor(scope, name)
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
          if (this.serviceCount() >= this.limits.maxServices) {
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

  /** Stops a service actor and resolves when its connection (and process tree) is closed. */
  removeActor(scope: Scope, name: string): Promise<void> {
    const actor = this.serviceActor(scope, name)
    if (!actor) return Promise.resolve()
    const connection = actor.getSnapshot().context.connection
    this.actor.send({ type: "REMOVE_SERVICE", scope, name })
    // Its OAuth tokens and registration go with it (never left behind in the token file), and its tool pins.
    void this.oauth.forget(scope, name)
    void this.pins?.forget(scope, name)
    void this.credentials.forget(scope, name)
    if (scope.kind === "agent" && Object.keys(this.serviceActors(scope)).length === 0) {
      this.actor.send({ type: "REMOVE_AGENT", agentId: scope.agentId })
    }
    const closed = this.connections.close(connection)
    // Replica mode: the owner gives its lease and view up once the connection is closed.
    return closed.then(() => this.replication.removed(scope, name))
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

  /**
   * Backs the services file up (`<file>.bak`, or a unique name beside it when that is taken; never
   * through a symlink; mode 0600), empties it, and stops every service of every scope.
   */
  resetServicesFile(): Promise<{ readonly backup_path: string; readonly removed: number }> {
    return this.serialize(async () => {
      const backup = await this.file.backup()
      const names = [STORE_SCOPE, ...this.agentIds().map(agentScope)].flatMap((scope) =>
        Object.keys(this.serviceActors(scope)).map((name) => ({ scope, name }))
      )
      await this.file.update((draft) => draft.replaceDocument({ mcpServers: {} }))
      await Promise.all(names.map(({ scope, name }) => this.removeActor(scope, name)))
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
   * Stops the store: with `createStore`, every layer it was built on (the actors, then the tokens
   * and records, then the cluster); otherwise (the server's layer graph releases the rest) the
   * actors and connections. Idempotent.
   */
  stop(): Promise<void> {
    this.stopping ??= this.releaseLayers?.() ?? this.shutdown()
    return this.stopping
  }

  /** `stop` releases the layers with `release` (which runs `shutdown` as the store layer's finalizer). */
  releaseWith(release: () => Promise<void>): void {
    this.releaseLayers = release
  }

  /**
   * The store layer's finalizer: every actor stopped and every connection closed (local process
   * trees ended). The records, tokens and cluster it used are released after it, by their layers. Idempotent.
   */
  shutdown(): Promise<void> {
    this.shuttingDown ??= (async () => {
      this.unwatch?.()
      clearInterval(this.cleanupTimer)
      await runToPromise(this.serialized(Effect.void)) // the change under way, if any, ends first
      this.replication.leaving() // no service is taken over while this replica stops
      this.lifecycle.stop() // the stopping actors' last changes are the shutdown's, not news
      await this.asyncCalls.close() // the calls running are kept interrupted, then cancelled
      this.approvals.close(STORE_STOPPING) // the other calls waiting for an approval stop waiting (an asynchronous one already did, interrupted)
      this.held.close()
      this.tasks.close() // the tasks clients follow are recorded interrupted; their handles stay valid
      this.actor.stop()
      await this.credentials.closeAll()
      await this.connections.closeAll()
      this.inspectors.clear()
    })()
    return this.shuttingDown
  }

  /** True once `stop()` (or the store layer's release) was called. */
  get stopped(): boolean {
    return this.stopping !== undefined || this.shuttingDown !== undefined
  }
}

/** The running store in the layer graph (src/runtime/store-layers.ts builds it). */
export class StoreService extends Context.Tag("mcp-store/Store")<StoreService, Store>() {}
