/**
 * The operations of one scope (the store, or one agent): what the HTTP handlers of the store and
 * agent groups call, and what a library user calls through `store.forStore()` /
 * `store.forAgent(id)`. Reads come from the service actors' snapshots; changes go to the services
 * file first, then to the actors, one at a time (`Store.serialize`).
 */
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js"
import { dict } from "../domain/dict.js"
import {
  DefinitionError,
  STATUSES,
  clientId,
  isStatus,
  resolveDefinition,
  sameDefinition,
  scopeLabel,
  serviceNameProblem,
  type Scope,
  type ServiceDefinition,
  type Status
} from "../domain/service.js"
import { statusOf, type ServiceActorRef, type ServiceSnapshot } from "../machines/service.js"
import { McpRequestError } from "../mcp/types.js"
import type { Outcome, RecordQuery } from "../records/records.js"
import { argumentProblems } from "./arguments.js"
import { awaitSnapshot } from "./bridge.js"
import {
  AmbiguousTool,
  Forbidden,
  InvalidArguments,
  ServiceNotFound,
  ServiceUnavailable,
  TooMany,
  ToolNotFound,
  ToolTimeout,
  UpstreamError,
  ValidationError,
  isStoreError,
  type FieldProblem
} from "./errors.js"
import { ownEntry } from "../machines/supervisor.js"
import type { Store } from "./store.js"
import {
  TOOL_SEPARATOR,
  callableName,
  iso,
  serviceView,
  toolViews,
  transitionView,
  type ServiceView,
  type ToolView
} from "./views.js"

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

/**
 * The path of the first `__proto__` key in a JSON value, if any. JSON.parse keeps it as a plain
 * key, but any copy by assignment (`Object.assign`, a decoder) would turn it into the object's
 * prototype: a definition with `"__proto__": {"command": ...}` would then inherit a command.
 */
const protoKeyIn = (value: unknown): string | undefined => {
  const pending: Array<{ readonly value: unknown; readonly path: string }> = [{ value, path: "" }]
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    if (typeof next.value !== "object" || next.value === null) continue
    for (const [key, v] of Object.entries(next.value)) {
      const at = next.path === "" ? key : `${next.path}.${key}`
      if (key === "__proto__") return at
      pending.push({ value: v, path: at })
    }
  }
  return undefined
}

/** The refusal of a call to a service that is not connected: its status and next retry. */
const unavailable = (snapshot: ServiceSnapshot): ServiceUnavailable => {
  const status = statusOf(snapshot)
  return new ServiceUnavailable({
    message: `Service '${snapshot.context.name}' is ${status}; try again later`,
    serviceName: snapshot.context.name,
    status,
    nextRetryAt: iso(snapshot.context.nextRetryAt),
    lastError: snapshot.context.lastError ?? null
  })
}

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
    const protoKey = protoKeyIn(def)
    if (protoKey !== undefined) {
      problems.push({ field: at(protoKey), problem: "is not allowed: \"__proto__\" is not a usable key" })
      continue
    }
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

/**
 * Whether a caller may define local (command) services: `disabled` with --no-local-services (400,
 * a setting of the server), `remote-client` for a client on the network when the store has no API
 * key (403: it may not, though a local caller may).
 */
export type LocalServicesPolicy = "allowed" | "disabled" | "remote-client"

/** Refuses local (command) definitions the policy does not allow; nothing is changed. */
const refuseLocal = (entries: ReadonlyArray<{ name: string; definition: ServiceDefinition }>, policy: LocalServicesPolicy | undefined) => {
  if (policy === undefined || policy === "allowed") return
  const local = entries.filter((e) => e.definition.command !== undefined)
  if (local.length === 0) return
  if (policy === "remote-client") {
    throw new Forbidden({
      message:
        `Local (command) services are refused from non-loopback clients when the store has no API key (${local.map((e) => e.name).join(", ")}): ` +
        "start the store with --api-key (or MCPSTORE_API_KEY) and send it, or with --allow-remote-local-services"
    })
  }
  throw ValidationError.of(
    local.map((e) => ({ field: `${e.name}.command`, problem: "local (command) services are disabled on this server (--no-local-services)" }))
  )
}

/** A definition as shown to clients: env and header values replaced by "***". */
const maskDefinition = (def: ServiceDefinition): ServiceDefinition => {
  const mask = (r: Readonly<Record<string, string>> | undefined) =>
    r === undefined ? undefined : dict(Object.keys(r).map((k) => [k, "***"]))
  const env = mask(def.env)
  const headers = mask(def.headers)
  return { ...def, ...(env ? { env } : {}), ...(headers ? { headers } : {}) }
}

/** The record outcome of a failed call. */
const outcomeOf = (e: unknown): Outcome => {
  if (!isStoreError(e)) return "transport_error" // the caller went away, or a bug
  switch (e._tag) {
    case "ToolTimeout":
      return "timeout"
    case "ServiceUnavailable":
    case "TooMany":
      return "unavailable"
    case "UpstreamError":
      return e.outcome
    default:
      return "protocol_error"
  }
}

let traceCounter = 0
const newTraceId = () => `${Date.now().toString(36)}-${(traceCounter++).toString(36)}-${Math.random().toString(36).slice(2, 8)}`

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
    const byName = ownEntry(actors, nameOrClientId)
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
  async addService(
    body: AddServiceInput,
    options: { readonly waitSeconds?: number; readonly local?: LocalServicesPolicy } = {}
  ): Promise<AddServiceResult> {
    const entries = parseDefinitions(body)
    refuseLocal(entries, options.local)
    const { maxServices, maxServicesPerRequest } = this.store.limits
    if (entries.length > maxServicesPerRequest) {
      throw new TooMany({
        message: `A request may define at most ${maxServicesPerRequest} services (max_services_per_request); this one defines ${entries.length}: send them in several requests`,
        limit: "max_services_per_request",
        max: maxServicesPerRequest,
        retryAfterSeconds: 1
      })
    }
    const waitMs = (options.waitSeconds ?? 0) * 1000
    // Places for the waits are taken first: once services are added, the wait is not refused.
    const lease = waitMs > 0 ? this.store.waiters.reserve(entries.length) : undefined
    try {
      const outcome = await this.store.serialize(async () => {
        const added: string[] = []
        const updated: string[] = []
        const unchanged: string[] = []
        for (const { name, definition } of entries) {
          const existing = ownEntry(this.actors(), name)
          if (!existing) added.push(name)
          else if (sameDefinition(existing.getSnapshot().context.definition, definition)) unchanged.push(name)
          else updated.push(name)
        }
        const total = this.store.serviceCount()
        if (added.length > 0 && total + added.length > maxServices) {
          throw new TooMany({
            message: `The store holds ${total} of at most ${maxServices} services (max_services); adding ${added.length} more is refused`,
            limit: "max_services",
            max: maxServices,
            retryAfterSeconds: 60
          })
        }
        const changed = entries.filter((e) => !unchanged.includes(e.name))
        if (changed.length > 0) {
          await this.store.file.update((draft) => {
            for (const { name, definition } of changed) draft.setService(this.scope, name, definition)
          })
        }
        for (const { name, definition } of changed) {
          const actor = ownEntry(this.actors(), name)
          if (actor) actor.send({ type: "UPDATE_DEFINITION", definition })
          else this.store.actor.send({ type: "ADD_SERVICE", scope: this.scope, name, definition })
        }
        return { added, updated, unchanged }
      })
      if (lease) {
        await Promise.all(
          entries.map(({ name }) => {
            const actor = ownEntry(this.actors(), name)
            return actor
              ? awaitSnapshot(actor, (s) => statusOf(s) !== "initializing", { timeoutMs: waitMs, gate: lease.gate })
              : Promise.resolve()
          })
        )
      }
      const services = entries.flatMap(({ name }) => {
        const actor = ownEntry(this.actors(), name)
        return actor ? [serviceView(actor.getSnapshot())] : []
      })
      return { services, ...outcome }
    } finally {
      lease?.release()
    }
  }

  /** Every service of this scope, in list form. */
  listServices(): ReadonlyArray<ServiceView> {
    return Object.values(this.actors()).map((a) => serviceView(a.getSnapshot()))
  }

  /** Every tool of this scope (callable names), or of one service. */
  listTools(serviceName?: string): ReadonlyArray<ToolView> {
    const actors = serviceName !== undefined ? [this.requireService(serviceName)] : Object.values(this.actors())
    return actors.flatMap((a) => toolViews(a.getSnapshot()))
  }

  /**
   * The services a callable name `<service>__<tool>` names, with the tool part: every registered
   * service of the scope whose name ends where a `__` begins (a name may end in `_`, so `a___x` is
   * `a` + `_x` or `a_` + `x`). Empty when the name names no registered service.
   */
  private namedServices(toolName: string): Array<{ actor: ServiceActorRef; original: string }> {
    const first = toolName.indexOf(TOOL_SEPARATOR)
    if (first <= 0) return []
    let end = first
    while (toolName[end + TOOL_SEPARATOR.length] === "_") end += 1
    const actors = this.actors()
    const out: Array<{ actor: ServiceActorRef; original: string }> = []
    for (let at = first; at <= end; at++) {
      const actor = ownEntry(actors, toolName.slice(0, at))
      if (actor) out.push({ actor, original: toolName.slice(at + TOOL_SEPARATOR.length) })
    }
    return out
  }

  /**
   * Resolves an original tool name in this scope: the one service that exposes it (or the one
   * `service_name` names). Names of the form `<service>__<tool>` with a registered `<service>` never
   * come here (see `callTarget`).
   */
  private resolveTool(toolName: string, serviceName: string | undefined): { actor: ServiceActorRef; original: string } {
    const pool = serviceName !== undefined ? [this.requireService(serviceName)] : Object.values(this.actors())
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
    throw this.toolNotFound(toolName)
  }

  private toolNotFound(toolName: string): ToolNotFound {
    return new ToolNotFound({
      message: `Tool '${toolName}' not found in ${this.label === "store" ? "the store" : `agent '${this.label}'`}`,
      toolName,
      scope: this.label
    })
  }

  private stillConnecting(toolName: string, timeoutSeconds: number): ToolTimeout {
    return new ToolTimeout({
      message: `Tool '${toolName}' did not answer within ${timeoutSeconds} s: its service is still connecting`,
      toolName,
      timeoutSeconds
    })
  }

  /**
   * The service and original tool name a call goes to. A callable name `<service>__<tool>` whose
   * `<service>` is registered in the scope goes to that service or nowhere: while it is
   * `initializing` (just added, restarting, starting up) the call waits for it, up to the deadline;
   * then a connected service without the tool is 404 and one that is not connected 503. It never
   * falls back to another service's tool of that literal name, which could otherwise stand in for
   * it whenever it has no tool list. Any other name is an original name (see `resolveTool`).
   */
  private async callTarget(
    input: CallToolInput,
    timeoutSeconds: number,
    remaining: () => number,
    signal: AbortSignal | undefined
  ): Promise<{ actor: ServiceActorRef; original: string }> {
    const waitFor = (actors: ReadonlyArray<ServiceActorRef>) =>
      Promise.all(
        actors.map((a) =>
          awaitSnapshot(a, (s) => statusOf(s) !== "initializing", { timeoutMs: remaining(), signal, gate: this.store.waiters })
        )
      )
    const initializing = (a: ServiceActorRef) => statusOf(a.getSnapshot()) === "initializing"
    for (let named = this.namedServices(input.tool_name); named.length > 0 && input.service_name === undefined; ) {
      const hit = named.find(({ actor, original }) => actor.getSnapshot().context.tools.some((t) => t.name === original))
      if (hit) return hit
      const pending = named.filter(({ actor }) => initializing(actor)).map(({ actor }) => actor)
      if (pending.length === 0) {
        const { actor } = named[0]!
        const snapshot = actor.getSnapshot()
        const status = statusOf(snapshot)
        if (isConnected(status)) throw this.toolNotFound(input.tool_name)
        throw unavailable(snapshot)
      }
      if (remaining() <= 0 || signal?.aborted) throw this.stillConnecting(input.tool_name, timeoutSeconds)
      await waitFor(pending)
      named = this.namedServices(input.tool_name)
    }
    try {
      return this.resolveTool(input.tool_name, input.service_name)
    } catch (e) {
      // Services still connecting have no tool list yet: give them until the deadline. (Looked for
      // only when the name does not resolve: scanning every service costs on each call.)
      if (!(e instanceof ToolNotFound)) throw e
      const pool = input.service_name !== undefined ? [this.requireService(input.service_name)] : Object.values(this.actors())
      const pending = pool.filter(initializing)
      if (pending.length === 0) throw e
      await waitFor(pending)
      try {
        return this.resolveTool(input.tool_name, input.service_name)
      } catch (e2) {
        // The deadline passed while a service that may own the tool was still connecting: the call
        // ran out of time (504), it did not find that the tool is missing (404).
        if (e2 instanceof ToolNotFound && pending.some(initializing)) throw this.stillConnecting(input.tool_name, timeoutSeconds)
        throw e2
      }
    }
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
    const target = await this.callTarget(input, timeoutSeconds, remaining, signal)
    const { actor, original } = target
    const serviceName = actor.getSnapshot().context.name
    const record = (outcome: Outcome, result: unknown, error: string | null) =>
      this.store.records.append({
        scope: this.scope.kind,
        agent_id: this.scope.kind === "agent" ? this.scope.agentId : null,
        service_name: serviceName,
        tool_name: original,
        params: input.args ?? {},
        result,
        outcome,
        error,
        duration_ms: Math.round((performance.now() - started) * 100) / 100,
        trace_id: traceId
      })
    this.store.inFlightCalls += 1
    try {
      const output = await this.invoke(actor, original, input, { started, traceId, timeoutSeconds, remaining, signal })
      await record(output.is_error ? "tool_error" : "success", output.result, output.is_error ? toolErrorMessage(output) : null)
      return output
    } catch (e) {
      await record(outcomeOf(e), null, e instanceof Error ? e.message : String(e))
      throw e
    } finally {
      this.store.inFlightCalls -= 1
    }
  }

  /** Sends a resolved call (arguments checked first); see `callTool`. */
  private async invoke(
    actor: ServiceActorRef,
    original: string,
    input: CallToolInput,
    call: {
      readonly started: number
      readonly traceId: string
      readonly timeoutSeconds: number
      readonly remaining: () => number
      readonly signal: AbortSignal | undefined
    }
  ): Promise<CallToolOutput> {
    const { started, traceId, timeoutSeconds, remaining, signal } = call
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
      if (e.kind === "message_too_large") {
        // The connection has closed itself: the service reconnects on its own.
        throw new UpstreamError({ message: `Service '${serviceName}' sent an answer too large: ${e.message}`, outcome: "message_too_large", serviceName, code: undefined })
      }
      if (e.kind === "transport") actor.send({ type: "HEALTH_REPORT", ok: false, error: e.message })
      throw new UpstreamError({ message: `Connection to '${serviceName}' broke during the call: ${e.message}`, outcome: "transport_error", serviceName, code: undefined })
    }
    const attempt = async (): Promise<CallToolResult> => {
      const ready = await awaitSnapshot(actor, (s) => statusOf(s) !== "initializing", { timeoutMs: remaining(), signal, gate: this.store.waiters })
      if (ready.end === "aborted") throw new McpRequestError("aborted", "the caller went away")
      const snapshot = actor.getSnapshot()
      const status = statusOf(snapshot)
      const connection = snapshot.context.connection
      if (!isConnected(status) || connection === undefined) {
        if (ready.end === "timeout") fail(new McpRequestError("timeout", "service still initializing"))
        throw unavailable(snapshot)
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
    const outcome = await awaitSnapshot(actor, (s) => wanted.has(statusOf(s)), {
      timeoutMs: input.timeout * 1000,
      signal,
      gate: this.store.waiters
    })
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

  /** One service in detail: its list form, its definition (secrets masked), its tools. */
  getServiceInfo(nameOrClientId: string) {
    const snapshot = this.requireService(nameOrClientId).getSnapshot()
    const view = serviceView(snapshot)
    return {
      service: { ...view, config: maskDefinition(snapshot.context.definition) },
      tools: toolViews(snapshot),
      connected: isConnected(view.status)
    }
  }

  /**
   * Health-checks every service of the scope now, concurrently (MCP ping), and feeds each outcome
   * into the service's lifecycle. A service that is not connected is reported as it is.
   */
  async checkServices(signal?: AbortSignal) {
    const timeoutMs = this.store.settings.ping_timeout_seconds * 1000
    const services = await Promise.all(
      Object.values(this.actors()).map(async (actor) => {
        const snapshot = actor.getSnapshot()
        const name = snapshot.context.name
        const connection = snapshot.context.connection
        const checked_at = new Date().toISOString()
        if (!isConnected(statusOf(snapshot)) || connection === undefined) {
          return { name, status: statusOf(snapshot), healthy: false, response_time_ms: null, error: snapshot.context.lastError ?? `not connected (${statusOf(snapshot)})`, checked_at }
        }
        let report: { ok: boolean; ms: number | null; error: string | null }
        try {
          const ms = await connection.ping({ timeoutMs, signal })
          report = { ok: true, ms: Math.round(ms * 100) / 100, error: null }
          actor.send({ type: "HEALTH_REPORT", ok: true, responseTimeMs: ms })
        } catch (e) {
          if (e instanceof McpRequestError && e.kind === "aborted") throw e
          report = { ok: false, ms: null, error: e instanceof Error ? e.message : String(e) }
          if (e instanceof McpRequestError && e.kind === "session_expired") {
            actor.send({ type: "TRANSPORT_CLOSED", reason: `session expired: ${e.message}`, immediate: true })
          } else {
            actor.send({ type: "HEALTH_REPORT", ok: false, error: report.error ?? "health check failed" })
          }
        }
        const status = statusOf(actor.getSnapshot())
        return { name, status, healthy: report.ok && status === "healthy", response_time_ms: report.ms, error: report.error, checked_at }
      })
    )
    return { services, healthy_count: services.filter((s) => s.healthy).length, total: services.length }
  }

  /** Count of services per status (all seven keys). */
  statusCounts(): Record<Status, number> {
    const counts = Object.fromEntries(STATUSES.map((s) => [s, 0])) as Record<Status, number>
    for (const a of Object.values(this.actors())) counts[statusOf(a.getSnapshot())] += 1
    return counts
  }

  /** The scope's health: healthy when every enabled service is, degraded when some are not, unhealthy when none is. */
  health() {
    const services = this.statusCounts()
    const enabled = Object.values(this.actors()).filter((a) => a.getSnapshot().context.definition.disabled !== true)
    const healthy = enabled.filter((a) => statusOf(a.getSnapshot()) === "healthy").length
    const status = healthy === enabled.length ? "healthy" : healthy === 0 ? "unhealthy" : "degraded"
    return {
      status: status as "healthy" | "degraded" | "unhealthy",
      services,
      total_services: Object.keys(this.actors()).length,
      uptime_seconds: Math.round((Date.now() - this.store.startedAt) / 10) / 100
    }
  }

  /** Statistics of the scope: services, tools, and tool calls from the records' aggregates. */
  stats() {
    const snapshots = Object.values(this.actors()).map((a) => a.getSnapshot())
    const summary = this.store.records.summary([this.label])
    return {
      total_services: snapshots.length,
      total_tools: snapshots.reduce((n, s) => n + s.context.tools.length, 0),
      healthy_services: snapshots.filter((s) => statusOf(s) === "healthy").length,
      services_by_status: this.statusCounts(),
      tools_by_service: dict(snapshots.map((s) => [s.context.name, s.context.tools.length])),
      tool_calls: {
        total: summary.total_executions,
        succeeded: summary.succeeded,
        failed: summary.failed,
        avg_duration_ms: summary.avg_duration_ms
      }
    }
  }

  /** The scope's part of the services file, as stored (the store: the whole file). */
  mcpConfig(): unknown {
    if (this.scope.kind === "store") return this.store.file.raw()
    return { mcpServers: ownEntry(this.store.file.read().agents, this.scope.agentId) ?? dict() }
  }

  /** Lifecycle detail of one service (service_status). */
  serviceStatus(nameOrClientId: string) {
    const snapshot = this.requireService(nameOrClientId).getSnapshot()
    const c = snapshot.context
    const stderr = c.connection?.stderrTail() ?? []
    return {
      name: c.name,
      status: statusOf(snapshot),
      consecutive_failures: c.consecutiveFailures,
      consecutive_successes: c.consecutiveSuccesses,
      reconnect_attempts: c.reconnectAttempts,
      next_retry_at: iso(c.nextRetryAt),
      last_error: c.lastError ?? null,
      last_health_check_at: iso(c.lastHealthCheckAt),
      response_time_ms: c.responseTimeMs === undefined ? null : Math.round(c.responseTimeMs * 100) / 100,
      state_entered_at: new Date(c.stateEnteredAt).toISOString(),
      transitions: c.transitions.map(transitionView),
      stderr_tail: [...stderr]
    }
  }

  /** Closes the connection and connects afresh, from any status; a `disabled` mark is removed. */
  restartService(nameOrClientId: string): Promise<{ readonly service_name: string; readonly status: Status }> {
    return this.store.serialize(async () => {
      const actor = this.requireService(nameOrClientId)
      const { name, definition } = actor.getSnapshot().context
      const stored = this.store.file.read()
      const services = this.scope.kind === "store" ? stored.store : ownEntry(stored.agents, this.scope.agentId)
      const current = services === undefined ? undefined : ownEntry(services, name)
      if (current?.disabled === true) {
        const { disabled: _d, ...enabled } = current
        await this.store.file.update((draft) => draft.setService(this.scope, name, enabled))
      }
      if (definition.disabled === true) {
        const { disabled: _d, ...enabled } = definition
        actor.send({ type: "UPDATE_DEFINITION", definition: enabled })
      } else {
        actor.send({ type: "RESTART" })
      }
      return { service_name: name, status: statusOf(actor.getSnapshot()) }
    })
  }

  /** Replaces a service's definition (written to the file), and reconnects when it changed. */
  updateService(
    nameOrClientId: string,
    body: unknown,
    options: { readonly local?: LocalServicesPolicy } = {}
  ): Promise<{ readonly service: ServiceView; readonly changed: boolean }> {
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      throw ValidationError.of([{ field: "body", problem: "must be a service definition object" }])
    }
    const given = (body as { name?: unknown }).name
    return this.store.serialize(async () => {
      const actor = this.requireService(nameOrClientId)
      const name = actor.getSnapshot().context.name
      if (given !== undefined && given !== name) {
        throw ValidationError.of([{ field: "name", problem: `must be '${name}' (the service being updated) or left out` }])
      }
      const entries = parseDefinitions({ ...(body as object), name })
      refuseLocal(entries, options.local)
      const definition = (entries[0] as { definition: ServiceDefinition }).definition
      const changed = !sameDefinition(actor.getSnapshot().context.definition, definition)
      if (changed) {
        await this.store.file.update((draft) => draft.setService(this.scope, name, definition))
        actor.send({ type: "UPDATE_DEFINITION", definition })
      }
      return { service: serviceView(actor.getSnapshot()), changed }
    })
  }

  /**
   * Graceful disconnect: `disconnecting`, then `disconnected` once the transport is closed. The
   * config entry stays, marked `"disabled": true`, so it stays disconnected after a restart.
   */
  async disconnectService(nameOrClientId: string, reason?: string): Promise<{ readonly service_name: string; readonly status: Status }> {
    const actor = await this.store.serialize(async () => {
      const actor = this.requireService(nameOrClientId)
      const { name, definition } = actor.getSnapshot().context
      await this.store.file.update((draft) => draft.setService(this.scope, name, { ...definition, disabled: true }))
      actor.send({ type: "DISCONNECT", reason: reason ?? "disconnect requested" })
      return actor
    })
    const timeoutMs = (this.store.settings.disconnection_timeout_seconds + 1) * 1000
    await awaitSnapshot(actor, (s) => statusOf(s) === "disconnected", { timeoutMs })
    return { service_name: actor.getSnapshot().context.name, status: statusOf(actor.getSnapshot()) }
  }

  /** Lists the tools again now, for one service or every connected service of the scope. */
  async refreshTools(serviceName?: string, signal?: AbortSignal) {
    const actors = serviceName !== undefined ? [this.requireService(serviceName)] : Object.values(this.actors())
    const timeoutMs = this.store.settings.ping_timeout_seconds * 1000 + 1000
    return Promise.all(
      actors.map(async (actor) => {
        const before = actor.getSnapshot().context
        const names = (tools: ReadonlyArray<{ name: string }>) => tools.map((t) => t.name).sort().join("\n")
        if (isConnected(statusOf(actor.getSnapshot()))) {
          actor.send({ type: "REFRESH_TOOLS" })
          await awaitSnapshot(actor, (s) => s.context.toolsVersion > before.toolsVersion || !isConnected(statusOf(s)), { timeoutMs, signal })
        }
        const after = actor.getSnapshot().context
        return {
          service_name: after.name,
          tool_count: after.tools.length,
          changed: names(after.tools) !== names(before.tools),
          status: statusOf(actor.getSnapshot()),
          error: isConnected(statusOf(actor.getSnapshot())) ? null : `not connected (${statusOf(actor.getSnapshot())})`
        }
      })
    )
  }

  /** Stops and removes every service of this scope (agent scope; the store uses `Store.resetConfig`). */
  resetAgent(): Promise<number> {
    if (this.scope.kind !== "agent") return this.store.resetConfig("store")
    const agentId = this.scope.agentId
    return this.store.serialize(async () => {
      const names = Object.keys(this.actors())
      await this.store.file.update((draft) => {
        draft.removeAgent(agentId)
      })
      await Promise.all(names.map((name) => this.store.removeActor(this.scope, name)))
      return names.length
    })
  }

  /** Tool-call records of this scope (or of every scope with `all`), newest first, with a summary. */
  async toolRecords(query: Omit<RecordQuery, "scope">, all = false) {
    const scope = all ? undefined : this.label
    const page = await this.store.records.query({ ...query, scope })
    const scopes = all ? undefined : [this.label]
    const { by_tool, by_service, total_executions } = this.store.records.summary(scopes)
    return { ...page, summary: { total_executions, by_tool, by_service } }
  }
}

