/**
 * The store: the actor system (store, agent and service actors), the services file, and the
 * operations on them. This is the library entry point (`createStore`) and the only thing the HTTP
 * handlers call: they decode, call a `ScopeApi` operation, encode.
 *
 * Every change is written to the services file before the operation resolves, and changes are
 * serialized so the file and the actors always agree.
 */
import { createActor, type InspectionEvent, type Observer } from "xstate"
import {
  STORE_SCOPE,
  agentIdProblem,
  agentScope,
  clientId,
  isStatus,
  resolveDefinition,
  sameDefinition,
  scopeLabel,
  serviceNameProblem,
  DefinitionError,
  STATUSES,
  type Scope,
  type ServiceDefinition,
  type Status
} from "../domain/service.js"
import { defaultMonitoring, type MonitoringSettings } from "../domain/settings.js"
import { ServicesFile, type ServicesConfig } from "../config/services-file.js"
import { agentMachine, type AgentActorRef } from "../machines/agent.js"
import { statusOf, type ServiceActorRef, type ServiceSnapshot } from "../machines/service.js"
import { storeMachine, type StoreActorRef } from "../machines/store.js"
import { STORE_SYSTEM_ID } from "../machines/supervisor.js"
import { McpRequestError } from "../mcp/types.js"
import { ConnectionRegistry, liveServiceMachine } from "./adapter.js"
import { argumentProblems } from "./arguments.js"
import { awaitSnapshot } from "./bridge.js"
import {
  AmbiguousTool,
  InvalidArguments,
  ServiceNotFound,
  ServiceUnavailable,
  ToolNotFound,
  ToolTimeout,
  UpstreamError,
  ValidationError,
  type FieldProblem
} from "./errors.js"
import { TOOL_SEPARATOR, callableName, iso, serviceView, toolViews, type ServiceView, type ToolView } from "./views.js"
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js"

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
}

/** What `addService` accepts: one definition with `name`, `{mcpServers: {...}}`, or an array of definitions. */
export type AddServiceInput = unknown

export interface AddServiceResult {
  readonly services: ReadonlyArray<ServiceView>
  readonly added: ReadonlyArray<string>
  readonly updated: ReadonlyArray<string>
  readonly unchanged: ReadonlyArray<string>
}

export interface CallToolInput {
  readonly tool_name: string
  readonly args?: Record<string, unknown> | undefined
  readonly service_name?: string | undefined
  /** Seconds; default 60. */
  readonly timeout?: number | undefined
}

export interface CallToolOutput {
  readonly result: unknown
  readonly content: CallToolResult["content"]
  readonly structured_content: Record<string, unknown> | null
  readonly is_error: boolean
  readonly tool_name: string
  readonly original_name: string
  readonly service_name: string
  readonly duration_ms: number
  readonly trace_id: string
}

export interface WaitServiceInput {
  readonly client_id_or_service_name: string
  readonly status: Status | ReadonlyArray<Status>
  /** Seconds. */
  readonly timeout: number
}

export interface WaitServiceOutput {
  readonly result: boolean
  readonly final_status: Status | "deleted"
  readonly elapsed_ms: number
}

export interface TwoStepDeleteResult {
  readonly service_name: string
  readonly step1_config_removal: boolean
  readonly step2_registry_cleanup: boolean
  readonly step1_error: string | null
  readonly step2_error: string | null
  readonly overall_success: boolean
}

const DEFAULT_CALL_TIMEOUT_SECONDS = 60
const isConnected = (s: Status) => s === "healthy" || s === "warning"

/** Parses an add_service body into named definitions, naming every problem. */
export const parseDefinitions = (body: unknown): Array<{ name: string; definition: ServiceDefinition }> => {
  const problems: FieldProblem[] = []
  const entries: Array<{ path: string; name: unknown; def: unknown }> = []
  if (Array.isArray(body)) {
    body.forEach((item, i) => entries.push({ path: `[${i}]`, name: (item as { name?: unknown } | null)?.name, def: item }))
  } else if (typeof body === "object" && body !== null && "mcpServers" in body) {
    const servers = (body as { mcpServers: unknown }).mcpServers
    if (typeof servers !== "object" || servers === null || Array.isArray(servers)) {
      problems.push({ field: "mcpServers", problem: "must be an object of name to definition" })
    } else {
      for (const [name, def] of Object.entries(servers)) entries.push({ path: `mcpServers.${name}`, name, def })
    }
  } else if (typeof body === "object" && body !== null) {
    entries.push({ path: "", name: (body as { name?: unknown }).name, def: body })
  } else {
    problems.push({ field: "body", problem: "must be a service definition, {mcpServers: {...}} or an array of definitions" })
  }
  if (entries.length === 0 && problems.length === 0) problems.push({ field: "body", problem: "names no service" })
  const out: Array<{ name: string; definition: ServiceDefinition }> = []
  const seen = new Set<string>()
  for (const { path, name, def } of entries) {
    const at = (f: string) => (path === "" ? f : `${path}.${f}`)
    if (typeof def !== "object" || def === null || Array.isArray(def)) {
      problems.push({ field: path || "body", problem: "must be an object" })
      continue
    }
    if (typeof name !== "string") {
      problems.push({ field: at("name"), problem: "is required and must be a string" })
      continue
    }
    const nameProblem = serviceNameProblem(name)
    if (nameProblem) problems.push({ field: at("name"), problem: nameProblem })
    if (seen.has(name)) problems.push({ field: at("name"), problem: `'${name}' is given twice` })
    seen.add(name)
    const { name: _n, ...definition } = def as Record<string, unknown>
    try {
      resolveDefinition(definition as ServiceDefinition)
    } catch (e) {
      if (!(e instanceof DefinitionError)) throw e
      for (const p of e.problems) problems.push({ field: at(p.field), problem: p.problem })
    }
    out.push({ name, definition: definition as ServiceDefinition })
  }
  if (problems.length > 0) throw ValidationError.of(problems)
  return out
}

/** The text form of an MCP tool result (shared/API.md, call_tool `result`). */
const resultValue = (r: CallToolResult): unknown => {
  if (r.structuredContent !== undefined) return r.structuredContent
  const content = r.content ?? []
  if (content.length > 0 && content.every((c) => c.type === "text")) {
    const texts = content.map((c) => (c as { text: string }).text)
    return texts.length === 1 ? texts[0] : texts
  }
  return content
}

/** The text a tool gave with `isError`, for the response message. */
export const toolErrorMessage = (output: Pick<CallToolOutput, "content">): string => {
  const texts = output.content.filter((c) => c.type === "text").map((c) => (c as { text: string }).text)
  return texts.length > 0 ? texts.join("\n") : "the tool reported an error"
}

let traceCounter = 0
const newTraceId = () => `${Date.now().toString(36)}-${(traceCounter++).toString(36)}-${Math.random().toString(36).slice(2, 8)}`

/** The store: actors, services file and operations. Create it with `createStore`. */
export class Store {
  /** When the store started (epoch ms). */
  readonly startedAt = Date.now()
  private queue: Promise<unknown> = Promise.resolve()
  private stopping: Promise<void> | undefined
  private unwatch: (() => void) | undefined

  private constructor(
    /** The services file. */
    readonly file: ServicesFile,
    /** The root actor: owns the store's services and every agent. */
    readonly actor: StoreActorRef,
    /** Every MCP connection the store has open. */
    readonly connections: ConnectionRegistry,
    /** Effective monitoring settings. */
    readonly settings: MonitoringSettings
  ) {}

  /** Opens the services file, starts the actor system and connects every service in the file. */
  static async create(options: CreateStoreOptions): Promise<Store> {
    const settings = defaultMonitoring(options.monitoring ?? {})
    const file = await ServicesFile.open(options.mcpConfigFile)
    const connections = new ConnectionRegistry()
    const service = liveServiceMachine(connections, options.clientName)
    const machine = storeMachine.provide({
      actors: { service, agent: agentMachine.provide({ actors: { service } }) }
    })
    const actor = createActor(machine, {
      input: { settings },
      systemId: STORE_SYSTEM_ID,
      ...(options.inspect !== undefined ? { inspect: options.inspect } : {})
    })
    actor.start()
    const store = new Store(file, actor, connections, settings)
    store.load(file.read())
    return store
  }

  private load(config: ServicesConfig): void {
    for (const [name, definition] of Object.entries(config.store)) {
      this.actor.send({ type: "ADD_SERVICE", scope: STORE_SCOPE, name, definition })
    }
    for (const [agentId, services] of Object.entries(config.agents)) {
      for (const [name, definition] of Object.entries(services)) {
        this.actor.send({ type: "ADD_SERVICE", scope: agentScope(agentId), name, definition })
      }
    }
  }

  /** Operations on the store scope. */
  forStore(): ScopeApi {
    return new ScopeApi(this, STORE_SCOPE)
  }

  /** Operations on one agent's scope; the id is validated (400 when malformed). */
  forAgent(agentId: string): ScopeApi {
    const problem = agentIdProblem(agentId)
    if (problem) throw ValidationError.of([{ field: "agent_id", problem }])
    return new ScopeApi(this, agentScope(agentId))
  }

  /** The agent actor of an agent, if it has any service. */
  agentActor(agentId: string): AgentActorRef | undefined {
    return this.actor.getSnapshot().context.agents[agentId]
  }

  /** Ids of the agents that have services. */
  agentIds(): ReadonlyArray<string> {
    return Object.keys(this.actor.getSnapshot().context.agents)
  }

  /** The service actors of a scope, by name. */
  serviceActors(scope: Scope): Readonly<Record<string, ServiceActorRef>> {
    if (scope.kind === "store") return this.actor.getSnapshot().context.services
    return this.agentActor(scope.agentId)?.getSnapshot().context.services ?? {}
  }

  /** The service actor of a name in a scope, if registered. */
  serviceActor(scope: Scope, name: string): ServiceActorRef | undefined {
    return this.serviceActors(scope)[name]
  }

  /** Every service actor of every scope. */
  allServiceActors(): ReadonlyArray<ServiceActorRef> {
    const out = [...Object.values(this.serviceActors(STORE_SCOPE))]
    for (const id of this.agentIds()) out.push(...Object.values(this.serviceActors(agentScope(id))))
    return out
  }

  /** Runs changes one at a time, so the file and the actors never disagree. */
  serialize<A>(task: () => Promise<A>): Promise<A> {
    const run = this.queue.then(task, task)
    this.queue = run.catch(() => undefined)
    return run
  }

  /**
   * Watches the services file and applies hand edits: new services are added, removed ones
   * stopped, changed ones reconnected; unchanged services are not touched.
   */
  watchFile(onApplied?: (summary: { added: string[]; updated: string[]; removed: string[] }) => void): void {
    this.unwatch?.()
    this.unwatch = this.file.watch((next) => {
      void this.serialize(async () => onApplied?.(this.applyConfig(next)))
    })
  }

  private applyConfig(next: ServicesConfig) {
    const summary = { added: [] as string[], updated: [] as string[], removed: [] as string[] }
    const scopes: Array<[Scope, Readonly<Record<string, ServiceDefinition>>]> = [
      [STORE_SCOPE, next.store],
      ...Object.entries(next.agents).map(([id, s]): [Scope, Readonly<Record<string, ServiceDefinition>>] => [agentScope(id), s])
    ]
    for (const id of this.agentIds()) if (!(id in next.agents)) scopes.push([agentScope(id), {}])
    for (const [scope, wanted] of scopes) {
      const label = (n: string) => (scope.kind === "store" ? n : `${scope.agentId}/${n}`)
      const current = this.serviceActors(scope)
      for (const [name, definition] of Object.entries(wanted)) {
        try {
          resolveDefinition(definition)
        } catch {
          continue // a half-edited definition is not applied
        }
        const actor = current[name]
        if (!actor) {
          this.actor.send({ type: "ADD_SERVICE", scope, name, definition })
          summary.added.push(label(name))
        } else {
          const before = actor.getSnapshot().context.definition
          if (!sameDefinition(before, definition)) {
            actor.send({ type: "UPDATE_DEFINITION", definition })
            summary.updated.push(label(name))
          } else if (definition.disabled === true && before.disabled !== true) {
            actor.send({ type: "DISCONNECT", reason: "disabled in the services file" })
            summary.updated.push(label(name))
          } else if (definition.disabled !== true && before.disabled === true) {
            actor.send({ type: "UPDATE_DEFINITION", definition })
            summary.updated.push(label(name))
          }
        }
      }
      for (const name of Object.keys(current)) {
        if (!(name in wanted)) {
          this.removeActor(scope, name)
          summary.removed.push(label(name))
        }
      }
    }
    return summary
  }

  /** Stops a service actor and resolves when its connection (and process tree) is closed. */
  removeActor(scope: Scope, name: string): Promise<void> {
    const actor = this.serviceActor(scope, name)
    if (!actor) return Promise.resolve()
    const connection = actor.getSnapshot().context.connection
    this.actor.send({ type: "REMOVE_SERVICE", scope, name })
    if (scope.kind === "agent" && Object.keys(this.serviceActors(scope)).length === 0) {
      this.actor.send({ type: "REMOVE_AGENT", agentId: scope.agentId })
    }
    return this.connections.close(connection)
  }

  /** Stops every actor and closes every connection (local process trees ended). Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.unwatch?.()
      await this.queue.catch(() => undefined)
      this.actor.stop()
      await this.connections.closeAll()
    })()
    return this.stopping
  }

  /** True once `stop()` was called. */
  get stopped(): boolean {
    return this.stopping !== undefined
  }
}

/** The operations of one scope (the store, or one agent). */
export class ScopeApi {
  constructor(
    private readonly store: Store,
    /** The scope these operations act on. */
    readonly scope: Scope
  ) {}

  private get label(): string {
    return scopeLabel(this.scope)
  }

  /** The service actors of this scope. */
  actors(): Readonly<Record<string, ServiceActorRef>> {
    return this.store.serviceActors(this.scope)
  }

  /** Finds a service by name, or by client_id (an exact name wins). */
  findService(nameOrClientId: string): ServiceActorRef | undefined {
    const actors = this.actors()
    const byName = actors[nameOrClientId]
    if (byName) return byName
    for (const [name, actor] of Object.entries(actors)) {
      if (clientId(this.scope, name, actor.getSnapshot().context.definition) === nameOrClientId) return actor
    }
    return undefined
  }

  /** Like `findService`, failing with ServiceNotFound. */
  requireService(nameOrClientId: string): ServiceActorRef {
    const actor = this.findService(nameOrClientId)
    if (!actor) throw ServiceNotFound.of(nameOrClientId, this.label)
    return actor
  }

  /**
   * Registers services. An identical definition changes nothing; a changed one replaces the old and
   * reconnects. The services file is written before this resolves. With `waitSeconds`, waits until
   * each named service has left `initializing` (or the wait ends).
   */
  async addService(body: AddServiceInput, options: { readonly waitSeconds?: number } = {}): Promise<AddServiceResult> {
    const entries = parseDefinitions(body)
    const outcome = await this.store.serialize(async () => {
      const added: string[] = []
      const updated: string[] = []
      const unchanged: string[] = []
      for (const { name, definition } of entries) {
        const existing = this.actors()[name]
        if (!existing) added.push(name)
        else if (sameDefinition(existing.getSnapshot().context.definition, definition)) unchanged.push(name)
        else updated.push(name)
      }
      const changed = entries.filter((e) => !unchanged.includes(e.name))
      if (changed.length > 0) {
        await this.store.file.update((draft) => {
          for (const { name, definition } of changed) draft.setService(this.scope, name, definition)
        })
      }
      for (const { name, definition } of changed) {
        const actor = this.actors()[name]
        if (actor) actor.send({ type: "UPDATE_DEFINITION", definition })
        else this.store.actor.send({ type: "ADD_SERVICE", scope: this.scope, name, definition })
      }
      return { added, updated, unchanged }
    })
    const waitMs = (options.waitSeconds ?? 0) * 1000
    if (waitMs > 0) {
      await Promise.all(
        entries.map(({ name }) => {
          const actor = this.actors()[name]
          return actor
            ? awaitSnapshot(actor, (s) => statusOf(s) !== "initializing", { timeoutMs: waitMs })
            : Promise.resolve()
        })
      )
    }
    const services = entries.flatMap(({ name }) => {
      const actor = this.actors()[name]
      return actor ? [serviceView(actor.getSnapshot())] : []
    })
    return { services, ...outcome }
  }

  /** Every service of this scope, in list form. */
  listServices(): ReadonlyArray<ServiceView> {
    return Object.values(this.actors()).map((a) => serviceView(a.getSnapshot()))
  }

  /** Every tool of this scope (callable names). */
  listTools(): ReadonlyArray<ToolView> {
    return Object.values(this.actors()).flatMap((a) => toolViews(a.getSnapshot()))
  }

  /**
   * Resolves a tool name in this scope: a callable name `<service>__<tool>`, or an original name that
   * only one service exposes (or the one `service_name` names).
   */
  private resolveTool(toolName: string, serviceName: string | undefined): { actor: ServiceActorRef; original: string } {
    const actors = this.actors()
    const sep = toolName.indexOf(TOOL_SEPARATOR)
    if (sep > 0 && serviceName === undefined) {
      const actor = actors[toolName.slice(0, sep)]
      const original = toolName.slice(sep + TOOL_SEPARATOR.length)
      if (actor && actor.getSnapshot().context.tools.some((t) => t.name === original)) return { actor, original }
    }
    const pool = serviceName !== undefined ? [this.requireService(serviceName)] : Object.values(actors)
    const matches = pool.filter((a) => a.getSnapshot().context.tools.some((t) => t.name === toolName))
    if (matches.length === 1) return { actor: matches[0]!, original: toolName }
    if (matches.length > 1) {
      const candidates = matches.map((a) => callableName(a.getSnapshot().context.name, toolName))
      throw new AmbiguousTool({
        message: `Tool '${toolName}' is offered by several services: use one of ${candidates.join(", ")} or give service_name`,
        toolName,
        candidates
      })
    }
    throw new ToolNotFound({
      message: `Tool '${toolName}' not found in ${this.label === "store" ? "the store" : `agent '${this.label}'`}`,
      toolName,
      scope: this.label
    })
  }

  /**
   * Calls a tool. Waits for an `initializing` service (up to the time-out); a service that is not
   * connected fails with ServiceUnavailable; an expired session is re-established and the call sent
   * once more; a transport failure counts as a failed health check.
   */
  async callTool(input: CallToolInput, signal?: AbortSignal): Promise<CallToolOutput> {
    const timeoutSeconds = input.timeout ?? DEFAULT_CALL_TIMEOUT_SECONDS
    const deadline = performance.now() + timeoutSeconds * 1000
    const remaining = () => Math.max(0, deadline - performance.now())
    const started = performance.now()
    const traceId = newTraceId()
    // Services still connecting have no tool list yet: give them until the deadline.
    const pending = Object.values(this.actors()).filter((a) => statusOf(a.getSnapshot()) === "initializing")
    let target: { actor: ServiceActorRef; original: string }
    try {
      target = this.resolveTool(input.tool_name, input.service_name)
    } catch (e) {
      if (pending.length === 0 || e instanceof AmbiguousTool) throw e
      await Promise.all(
        pending.map((a) => awaitSnapshot(a, (s) => statusOf(s) !== "initializing", { timeoutMs: remaining(), signal }))
      )
      target = this.resolveTool(input.tool_name, input.service_name)
    }
    const { actor, original } = target
    const serviceName = actor.getSnapshot().context.name
    const tool = actor.getSnapshot().context.tools.find((t) => t.name === original)
    const problems = tool ? argumentProblems(tool, input.args ?? {}) : []
    if (problems.length > 0) {
      throw new InvalidArguments({
        message: `Invalid arguments for '${input.tool_name}': ${problems.map((p) => `${p.field} ${p.problem}`).join("; ")}`,
        toolName: input.tool_name,
        upstream: null,
        problems
      })
    }
    const fail = (e: McpRequestError): never => {
      if (e.kind === "aborted") throw e
      if (e.kind === "timeout") {
        throw new ToolTimeout({
          message: `Tool '${input.tool_name}' did not answer within ${timeoutSeconds} s`,
          toolName: input.tool_name,
          timeoutSeconds
        })
      }
      if (e.kind === "protocol" && e.code === -32602) {
        throw new InvalidArguments({
          message: `Invalid arguments for '${input.tool_name}': ${e.message}`,
          toolName: input.tool_name,
          upstream: e.data ?? null,
          problems: []
        })
      }
      if (e.kind === "protocol") {
        throw new UpstreamError({ message: `Service '${serviceName}' answered with an error: ${e.message}`, outcome: "protocol_error", serviceName, code: e.code })
      }
      if (e.kind === "transport") actor.send({ type: "HEALTH_REPORT", ok: false, error: e.message })
      throw new UpstreamError({ message: `Connection to '${serviceName}' broke during the call: ${e.message}`, outcome: "transport_error", serviceName, code: undefined })
    }
    const attempt = async (): Promise<CallToolResult> => {
      const ready = await awaitSnapshot(actor, (s) => statusOf(s) !== "initializing", { timeoutMs: remaining(), signal })
      if (ready.end === "aborted") throw new McpRequestError("aborted", "the caller went away")
      const snapshot = actor.getSnapshot()
      const status = statusOf(snapshot)
      const connection = snapshot.context.connection
      if (!isConnected(status) || connection === undefined) {
        if (ready.end === "timeout") fail(new McpRequestError("timeout", "service still initializing"))
        throw new ServiceUnavailable({
          message: `Service '${serviceName}' is ${status}; try again later`,
          serviceName,
          status,
          nextRetryAt: iso(snapshot.context.nextRetryAt),
          lastError: snapshot.context.lastError ?? null
        })
      }
      return connection.callTool(original, input.args ?? {}, { timeoutMs: remaining(), signal })
    }
    let result: CallToolResult
    try {
      result = await attempt()
    } catch (e) {
      if (!(e instanceof McpRequestError)) throw e
      if (e.kind !== "session_expired") fail(e)
      // The server never ran the call: reconnect at once and send it once more.
      actor.send({ type: "TRANSPORT_CLOSED", reason: `session expired: ${e.message}`, immediate: true })
      await awaitSnapshot(actor, (s) => isConnected(statusOf(s)), { timeoutMs: remaining(), signal })
      try {
        result = await attempt()
      } catch (e2) {
        if (e2 instanceof McpRequestError) fail(e2)
        throw e2
      }
    }
    return {
      result: resultValue(result),
      content: result.content ?? [],
      structured_content: (result.structuredContent as Record<string, unknown> | undefined) ?? null,
      is_error: result.isError === true,
      tool_name: callableName(serviceName, original),
      original_name: original,
      service_name: serviceName,
      duration_ms: Math.round((performance.now() - started) * 100) / 100,
      trace_id: traceId
    }
  }

  /**
   * Waits until a service has one of the statuses (at once if it already has), the time-out passes,
   * or the service is deleted. Event-driven: answers the moment the status changes.
   */
  async waitService(input: WaitServiceInput, signal?: AbortSignal): Promise<WaitServiceOutput> {
    const targets = Array.isArray(input.status) ? input.status : [input.status as Status]
    const bad = targets.filter((s) => !isStatus(s))
    if (bad.length > 0 || targets.length === 0) {
      throw ValidationError.of([{ field: "status", problem: `must be one of ${STATUSES.join(", ")} (or an array of them)` }])
    }
    const actor = this.requireService(input.client_id_or_service_name)
    const wanted = new Set<Status>(targets)
    const outcome = await awaitSnapshot(actor, (s) => wanted.has(statusOf(s)), { timeoutMs: input.timeout * 1000, signal })
    return {
      result: outcome.end === "reached",
      final_status: outcome.end === "stopped" ? "deleted" : statusOf(outcome.snapshot as ServiceSnapshot),
      elapsed_ms: Math.round(outcome.elapsedMs * 100) / 100
    }
  }

  /** Removes a service from the services file and stops it (connection closed, process tree ended). */
  async deleteService(nameOrClientId: string): Promise<{ readonly service_name: string }> {
    return this.store.serialize(async () => {
      const name = this.requireService(nameOrClientId).getSnapshot().context.name
      await this.store.file.update((draft) => {
        draft.removeService(this.scope, name)
      })
      await this.store.removeActor(this.scope, name)
      return { service_name: name }
    })
  }

  /** delete_service_two_step: step 1 removes the config entry durably, step 2 stops the actor. */
  async deleteServiceTwoStep(nameOrClientId: string): Promise<TwoStepDeleteResult> {
    return this.store.serialize(async () => {
      const name = this.requireService(nameOrClientId).getSnapshot().context.name
      let step1Error: string | null = null
      let step2Error: string | null = null
      try {
        await this.store.file.update((draft) => {
          draft.removeService(this.scope, name)
        })
      } catch (e) {
        step1Error = e instanceof Error ? e.message : String(e)
      }
      if (step1Error === null) {
        try {
          await this.store.removeActor(this.scope, name)
        } catch (e) {
          step2Error = e instanceof Error ? e.message : String(e)
        }
      } else {
        step2Error = "skipped: the config entry could not be removed"
      }
      const step1 = step1Error === null
      const step2 = step1 && step2Error === null
      return {
        service_name: name,
        step1_config_removal: step1,
        step2_registry_cleanup: step2,
        step1_error: step1Error,
        step2_error: step2Error,
        overall_success: step1 && step2
      }
    })
  }
}

/** Creates a store: opens the services file, starts the actors and connects every service in it. */
export const createStore = (options: CreateStoreOptions): Promise<Store> => Store.create(options)
