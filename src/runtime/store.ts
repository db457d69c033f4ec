/**
 * The store: the actor system (store, agent and service actors), the services file, and the
 * operations on them. This is the library entry point (`createStore`) and the only thing the HTTP
 * handlers call: they decode, call a `ScopeApi` operation, encode.
 *
 * Every change is written to the services file (in replica mode, the cluster's Redis:
 * docs/replicas.md) before the operation resolves, and changes are serialized so the definitions
 * and the actors always agree.
 */
import { dirname } from "node:path"
import { Effect } from "effect"
import { assign, createActor, type InspectionEvent, type Observer } from "xstate"
import { dict } from "../domain/dict.js"
import { STORE_SCOPE, agentIdProblem, agentScope, resolveDefinition, sameDefinition, type Scope, type ServiceDefinition } from "../domain/service.js"
import { defaultMonitoring, type MonitoringSettings } from "../domain/settings.js"
import { describeProblem, ServicesFile, type EntryProblem, type ServicesConfig } from "../config/services-file.js"
import { resolveStoreLimits, type ClusterOptions, type StoreLimits } from "../config/options.js"
import type { DefinitionsStore } from "../config/definitions-store.js"
import { Cluster, type ReplicaHost } from "../cluster/cluster.js"
import { parseServiceField, serviceField } from "../cluster/keys.js"
import { replicatedServiceMachine, type ReplicatedActorRef } from "../machines/replicated.js"
import { agentMachine, type AgentActorRef } from "../machines/agent.js"
import { statusOf, type ServiceActorRef, type ServiceEvent } from "../machines/service.js"
import { storeMachine, type StoreActorRef } from "../machines/store.js"
import { STORE_SYSTEM_ID, ownEntry } from "../machines/supervisor.js"
import { ToolRecords, type RecordsBackend } from "../records/records.js"
import { RedisRecords } from "../cluster/records.js"
import { RedisTokenStore } from "../cluster/tokens.js"
import { UpstreamPolicy } from "../mcp/upstream-policy.js"
import { oauthFetch } from "../mcp/oauth.js"
import { ConnectionRegistry, connectionLabel, liveServiceMachine } from "./adapter.js"
import { Waiters } from "./bridge.js"
import { ValidationError } from "./errors.js"
import { ScopeContext, type StoreHost } from "./host.js"
import { ProgressEvents } from "./progress.js"
import { runToPromise } from "./run.js"
import { ScopeApi } from "./scope.js"
import { LifecycleLog } from "./lifecycle-log.js"
import { log } from "./log.js"
import { indexDelayedEvents } from "./timers.js"
import { OAuthManager } from "./oauth.js"
import { TokenVault, type TokenStore } from "./oauth-tokens.js"

/** Options of `createStore`. */
export interface CreateStoreOptions {
  /** The services file (mcp.json style); created when missing. */
  readonly mcpConfigFile: string
  /** Monitoring settings; missing keys take the defaults of shared/LIFECYCLE.md. */
  readonly monitoring?: Partial<MonitoringSettings> | undefined
  /** XState inspection observer (every actor, event and snapshot). */
  readonly inspect?: Observer<InspectionEvent> | ((event: InspectionEvent) => void) | undefined
  /** Name this store gives itself in MCP handshakes. */
  readonly clientName?: string | undefined
  /** Tool-record file size limit in MB (default 30; -1 unlimited). */
  readonly toolRecordMaxFileSize?: number | undefined
  /** Tool-record retention in days (default 7; -1 never delete). */
  readonly toolRecordRetentionDays?: number | undefined
  /** The store's caps (message size, services, waiters); missing keys take the defaults. */
  readonly limits?: Partial<StoreLimits> | undefined
  /**
   * Replica mode (docs/replicas.md): the definitions live in this cluster's Redis, shared by every
   * replica; the services file is imported when the cluster is empty. Undefined: the services file.
   */
  readonly cluster?: ClusterOptions | undefined
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
  private unwatch: (() => void) | undefined
  private readonly cleanupTimer: NodeJS.Timeout
  /** Tool calls in progress. */
  inFlightCalls = 0
  /** Every call's progress, for the `/events` streams. */
  readonly progress = new ProgressEvents()
  /** The store's OAuth callback URL (`<base>/oauth/callback`), set by the HTTP server once it listens. */
  oauthCallbackUrl: string | undefined
  /** Waits on services in progress (wait_service, add_service `?wait`, calls), capped by `maxWaiters`. */
  readonly waiters: Waiters

  private constructor(
    /** The live definitions: the services file, or the cluster's Redis in replica mode. */
    readonly file: DefinitionsStore,
    /** The root actor: owns the store's services and every agent. */
    readonly actor: StoreActorRef,
    /** Every MCP connection the store has open. */
    readonly connections: ConnectionRegistry,
    /** Effective monitoring settings. */
    readonly settings: MonitoringSettings,
    /** The tool-call records. */
    readonly records: RecordsBackend,
    /** The store's caps. */
    readonly limits: StoreLimits,
    private readonly inspectors: Set<(event: InspectionEvent) => void>,
    private readonly lifecycle: LifecycleLog,
    /** OAuth of upstream services: tokens (encrypted at rest) and authorizations under way. */
    readonly oauth: OAuthManager,
    /** Replica mode: the cluster this store is a replica of (undefined: one store on its file). */
    readonly cluster: Cluster | undefined
  ) {
    this.waiters = new Waiters(limits.maxWaiters)
    // Retention is enforced at start (by ToolRecords.open) and every `cleanup_hours`.
    this.cleanupTimer = setInterval(() => void this.records.cleanup().catch(() => undefined), settings.cleanup_hours * 3_600_000)
    this.cleanupTimer.unref()
  }

  /** Opens the services file, starts the actor system and connects every service in the file. */
  static async create(options: CreateStoreOptions): Promise<Store> {
    const settings = defaultMonitoring(options.monitoring ?? {})
    const limits: StoreLimits = { ...resolveStoreLimits({}), ...options.limits }
    const servicesFile = await ServicesFile.open(options.mcpConfigFile)
    const cluster = options.cluster === undefined ? undefined : await Cluster.start(options.cluster, servicesFile.path, servicesFile.read(), limits.maxMessageBytes)
    const file: DefinitionsStore = cluster?.definitions ?? servicesFile
    // Replica mode: records and OAuth tokens live in the cluster's Redis (docs/replicas-data.md), on its commands client.
    const shared = cluster === undefined ? undefined : { client: cluster.connection.client, cluster: cluster.options.name }
    const recordsOptions = {
      maxFileSizeMb: options.toolRecordMaxFileSize ?? 30,
      retentionDays: options.toolRecordRetentionDays ?? 7,
      maxValueBytes: limits.toolRecordMaxValueBytes
    }
    // The cluster's connections are released when the store cannot start after all.
    const records: RecordsBackend = await (shared === undefined ? ToolRecords.open(file.path, recordsOptions) : RedisRecords.open(shared, recordsOptions)).catch(
      async (e: unknown) => {
        await cluster?.stop()
        throw e
      }
    )
    const upstream = new UpstreamPolicy({ allow: limits.upstreamAllow, allowMetadata: limits.upstreamAllowMetadata })
    const connections = new ConnectionRegistry({ maxMessageBytes: limits.maxMessageBytes, servicesDir: dirname(file.path), upstream })
    // OAuth of upstreams (src/runtime/oauth.ts): it tells the service actors, found once the store exists.
    let self: Store | undefined
    const vault: TokenStore = await (shared === undefined ? TokenVault.open(file.path) : RedisTokenStore.open(shared)).catch(async (e: unknown) => {
      await records.close() // before the cluster's client it uses
      await cluster?.stop()
      throw e
    })
    const oauth = new OAuthManager(vault, (scope, name) => self?.serviceActor(scope, name), () => self?.oauthCallbackUrl, oauthFetch(upstream))
    const live = liveServiceMachine(connections, options.clientName, oauth)
    // Replica mode: each service is a replicated actor, running the live machine only while this replica owns it.
    const service = cluster === undefined ? live : (replicatedMachine(cluster, live) as unknown as typeof live)
    const machine = storeMachine.provide({
      actors: { service, agent: agentMachine.provide({ actors: { service } }) }
    })
    const user = options.inspect
    const inspectors = new Set<(event: InspectionEvent) => void>()
    // Status changes as log lines, watched from outside the machines.
    const lifecycle = new LifecycleLog()
    const actor = createActor(machine, {
      input: { settings },
      systemId: STORE_SYSTEM_ID,
      inspect: (event: InspectionEvent) => {
        if (cluster !== undefined) clusterAdded(cluster, event)
        lifecycle.inspect(event)
        for (const listener of inspectors) listener(event)
        if (typeof user === "function") user(event)
        else user?.next?.(event)
      }
    })
    indexDelayedEvents(actor.system)
    actor.start()
    const store = new Store(file, actor, connections, settings, records, limits, inspectors, lifecycle, oauth, cluster)
    self = store
    store.load(file.read())
    if (cluster !== undefined) {
      // Replica mode: the changes made through the other replicas are applied as a reload is, and
      // the services' leases decide which replica runs each.
      store.watchFile()
      await cluster.attach(store.replicaHost()).catch(async (e: unknown) => {
        await store.stop()
        throw e
      })
    }
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
          const summary = this.applyConfig(this.cluster === undefined ? next : this.file.read())
          const changes = [...summary.added.map((n) => `+${n}`), ...summary.updated.map((n) => `~${n}`), ...summary.removed.map((n) => `-${n}`)]
          if (changes.length > 0) {
            const what = this.cluster === undefined ? "services file reloaded" : "cluster definitions applied"
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
    // Its OAuth tokens and registration go with it (never left behind in the token file).
    void this.oauth.forget(scope, name)
    if (scope.kind === "agent" && Object.keys(this.serviceActors(scope)).length === 0) {
      this.actor.send({ type: "REMOVE_AGENT", agentId: scope.agentId })
    }
    const closed = this.connections.close(connection)
    // Replica mode: the owner gives its lease and view up once the connection is closed.
    return this.cluster === undefined ? closed : closed.then(() => this.cluster?.removed(serviceField(scope, name)))
  }

  /** The store's actors as the cluster sees them (replica mode). */
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

  /** Stops every actor and closes every connection (local process trees ended). Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.unwatch?.()
      clearInterval(this.cleanupTimer)
      await runToPromise(this.serialized(Effect.void)) // the change under way, if any, ends first
      this.cluster?.leaving() // no service is taken over while this replica stops
      this.lifecycle.stop() // the stopping actors' last changes are the shutdown's, not news
      this.actor.stop()
      await Promise.all([this.connections.closeAll(), this.records.close(), this.oauth.vault.close?.()])
      // Last: the records and tokens above use the cluster's Redis client.
      await this.cluster?.stop()
      this.inspectors.clear()
    })()
    return this.stopping
  }

  /** True once `stop()` was called. */
  get stopped(): boolean {
    return this.stopping !== undefined
  }
}

/**
 * The replicated service machine (src/machines/replicated.ts) on a cluster: it runs `live` while
 * this replica owns the service, forwards to the owner otherwise, and publishes what it runs.
 */
const replicatedMachine = (cluster: Cluster, live: ReturnType<typeof liveServiceMachine>) =>
  replicatedServiceMachine.provide({
    actors: { service: live },
    actions: {
      useRemote: assign(({ context }) => ({ connection: cluster.remote(serviceField(context.scope, context.name)) })),
      forward: ({ context, event }) => cluster.forward(serviceField(context.scope, context.name), event as ServiceEvent),
      publish: ({ context, event }) => {
        if (event.type === "VIEW" && event.local === true) cluster.publish(serviceField(context.scope, context.name), event.view, event.connection)
      }
    }
  })

/** Tells the cluster of each service added to the store (the root's ADD_SERVICE names its scope), once the actor exists. */
const clusterAdded = (cluster: Cluster, event: InspectionEvent): void => {
  if (event.type !== "@xstate.event" || event.event.type !== "ADD_SERVICE") return
  const added = event.event as unknown as { scope?: Scope; name: string }
  const scope = added.scope
  if (scope !== undefined) queueMicrotask(() => cluster.added(serviceField(scope, added.name)))
}

/** Creates a store: opens the services file, starts the actors and connects every service in it. */
export const createStore = (options: CreateStoreOptions): Promise<Store> => Store.create(options)
