/**
 * The commands of a scope: what changes its services. Each change goes to the services file
 * first, then to the actors, one at a time (`StoreHost.serialized`), so the file and the actors
 * always agree; a refused change (bad definition, a cap, a local service the caller may not add)
 * changes nothing.
 */
import { Effect, Either, type ParseResult, Schema } from "effect"
import {
  AddServiceBody,
  namedDefinitions,
  parseErrorProblems,
  type NamedDefinition,
  type ServiceName,
  UpdateServiceBody
} from "../domain/schemas.js"
import { sameDefinition, type ServiceDefinition, type Status } from "../domain/service-definition.js"
import { statusOf } from "../machines/service.js"
import { ownEntry } from "../machines/supervisor.js"
import { McpRequestError } from "../mcp/types.js"
import { awaitSnapshot } from "./bridge.js"
import { ClusterUnavailable, Forbidden, TooMany, ValidationError, type ServiceNotFound } from "../domain/errors.js"
import type { ScopeContext } from "./host.js"
import { attempt } from "./run.js"
import { isConnected, serviceView, type ServiceView } from "./service-views.js"

/** What `addService` takes: add_service's body, decoded (`AddServiceBody` of src/domain/schemas.ts). */
export type AddServiceInput = AddServiceBody

/** What `updateService` takes: update_service's body, decoded (`UpdateServiceBody` of src/domain/schemas.ts). */
export type UpdateServiceInput = UpdateServiceBody

export interface AddServiceResult {
  readonly services: ReadonlyArray<ServiceView>
  readonly added: ReadonlyArray<string>
  readonly updated: ReadonlyArray<string>
  readonly unchanged: ReadonlyArray<string>
  /** After a wait: the services that are connected (healthy or warning). */
  readonly connected?: ReadonlyArray<string>
  /** After a wait: the services whose connection failed (reconnecting or unreachable), with why. */
  readonly failed?: ReadonlyArray<FailedService>
  /** After a wait: the services neither connected nor failed (still connecting, or disabled). */
  readonly pending?: ReadonlyArray<string>
}

/** A service whose connection failed during add_service's wait. */
export interface FailedService {
  readonly name: string
  readonly status: Status
  readonly error: string
  /** What the user can do about it, when the failure says (e.g. `command contains spaces: ...`). */
  readonly hint: string | null
}

/** How each service of add_service stands at the end of its wait. */
const outcomesOf = (views: ReadonlyArray<ServiceView>) => {
  const connected: string[] = []
  const failed: FailedService[] = []
  const pending: string[] = []
  for (const v of views) {
    if (isConnected(v.status)) connected.push(v.name)
    else if (v.status === "reconnecting" || v.status === "unreachable") {
      failed.push({ name: v.name, status: v.status, error: v.last_error ?? "connection failed", hint: v.hint })
    } else pending.push(v.name)
  }
  return { connected, failed, pending }
}

export interface TwoStepDeleteResult {
  readonly service_name: string
  readonly step1_config_removal: boolean
  readonly step2_registry_cleanup: boolean
  readonly step1_error: string | null
  readonly step2_error: string | null
  readonly overall_success: boolean
}

/** A decode failure as the store's ValidationError, each field named. */
const invalid = (e: ParseResult.ParseError): ValidationError => ValidationError.of(parseErrorProblems(e))

/**
 * Decodes add_service's body with the domain's `AddServiceBody`, for callers that did not decode
 * it at their edge (the library's `ScopeApi`; the HTTP contract decodes with the same schema).
 */
export const decodeAddServiceBody = (body: unknown): Effect.Effect<AddServiceBody, ValidationError> =>
  Effect.mapError(Schema.decodeUnknown(AddServiceBody, { errors: "all" })(body), invalid)

/** Decodes update_service's body with the domain's `UpdateServiceBody` (see `decodeAddServiceBody`). */
export const decodeUpdateServiceBody = (body: unknown): Effect.Effect<UpdateServiceBody, ValidationError> =>
  Effect.mapError(Schema.decodeUnknown(UpdateServiceBody, { errors: "all" })(body), invalid)

/** Parses an add_service body into named definitions, naming every problem (throws a `ValidationError`). */
export const parseDefinitions = (body: unknown): Array<NamedDefinition> =>
  [...namedDefinitions(Either.getOrThrowWith(Schema.decodeUnknownEither(AddServiceBody, { errors: "all" })(body), invalid))]

/**
 * Whether a caller may define local (command) services: `disabled` with --no-local-services (400,
 * a setting of the server), `remote-client` for a client on the network when the store has no API
 * key (403: it may not, though a local caller may).
 */
export type LocalServicesPolicy = "allowed" | "disabled" | "remote-client" | "not-admin"

/** Refuses local (command) definitions the policy does not allow; nothing is changed. */
const refuseLocal = (entries: ReadonlyArray<NamedDefinition>, policy: LocalServicesPolicy | undefined): void => {
  if (policy === undefined || policy === "allowed") return
  const local = entries.filter((e) => e.definition.command !== undefined)
  if (local.length === 0) return
  if (policy === "not-admin") {
    // A local service runs a command on the store's machine: only an admin key may define one.
    throw new Forbidden({ message: `Local (command) services need an admin key (${local.map((e) => e.name).join(", ")}): agent and reader keys may add remote services only` })
  }
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

/** A service's definition as the services file (or the cluster) holds it, `disabled` mark included. */
const storedDefinition = (ctx: ScopeContext, name: string): ServiceDefinition | undefined => {
  const stored = ctx.host.file.read()
  const services = ctx.scope.kind === "store" ? stored.store : ownEntry(stored.agents, ctx.scope.agentId)
  return services === undefined ? undefined : ownEntry(services, name)
}

/**
 * Why a definition given for an existing service would enable or disable it, or undefined: that is
 * what restart_service and disconnect_service do (they also connect or disconnect it), not an edit
 * of its definition, which would write the mark without acting on it.
 */
const disabledChange = (stored: ServiceDefinition | undefined, next: ServiceDefinition, field: string): { field: string; problem: string } | undefined =>
  next.disabled === undefined || next.disabled === (stored?.disabled === true)
    ? undefined
    : { field, problem: next.disabled ? "would disable the service: use disconnect_service" : "would enable the disabled service: use restart_service" }

/** A definition given without `disabled` for a disabled service keeps the mark (it stays disconnected, across restarts too). */
const keepDisabled = (stored: ServiceDefinition | undefined, next: ServiceDefinition): ServiceDefinition =>
  stored?.disabled === true && next.disabled === undefined ? { ...next, disabled: true } : next

/**
 * A step that changes the definitions: the services file (its failure is a bug or a broken disk: a
 * defect), or in replica mode the cluster's Redis, which may be away (`ClusterUnavailable`, 503).
 */
const writeFile = (ctx: ScopeContext, change: Parameters<ScopeContext["host"]["file"]["update"]>[0]): Effect.Effect<void, ClusterUnavailable> =>
  definitionsChange(() => ctx.host.file.update(change))

/** A change of the definitions as a Promise: `ClusterUnavailable` is its failure, anything else a defect. */
export const definitionsChange = <A>(task: () => Promise<A>): Effect.Effect<A, ClusterUnavailable> =>
  Effect.flatMap(Effect.either(Effect.tryPromise({ try: task, catch: (e) => e })), (outcome) =>
    outcome._tag === "Right" ? Effect.succeed(outcome.right) : outcome.left instanceof ClusterUnavailable ? Effect.fail(outcome.left) : Effect.die(outcome.left)
  )

const isRefusal = (e: unknown): e is ValidationError | Forbidden => e instanceof ValidationError || e instanceof Forbidden

/**
 * Registers services. An identical definition changes nothing; a changed one replaces the old and
 * reconnects. The services file is written before this completes. With `waitSeconds`, waits until
 * each named service has left `initializing` (or the wait ends, or the caller goes away).
 */
export const addService = (
  ctx: ScopeContext,
  body: AddServiceInput,
  options: { readonly waitSeconds?: number | undefined; readonly local?: LocalServicesPolicy | undefined } = {}
): Effect.Effect<AddServiceResult, ValidationError | Forbidden | TooMany | ClusterUnavailable> =>
  Effect.gen(function* () {
    const entries = namedDefinitions(body)
    yield* attempt(() => refuseLocal(entries, options.local), isRefusal)
    const { maxServices, maxServicesPerRequest } = ctx.host.limits
    if (entries.length > maxServicesPerRequest) {
      return yield* new TooMany({
        message: `A request may define at most ${maxServicesPerRequest} services (max_services_per_request); this one defines ${entries.length}: send them in several requests`,
        limit: "max_services_per_request",
        max: maxServicesPerRequest,
        retryAfterSeconds: 1
      })
    }
    const waitMs = (options.waitSeconds ?? 0) * 1000
    const commit = ctx.host.serialized(
      Effect.gen(function* () {
        const added: string[] = []
        const updated: string[] = []
        const unchanged: string[] = []
        const toggled: Array<{ field: string; problem: string }> = []
        const kept = entries.map(({ name, definition }) => {
          const existing = ownEntry(ctx.actors(), name)
          if (existing === undefined) {
            added.push(name)
            return { name, definition }
          }
          const stored = storedDefinition(ctx, name)
          const problem = disabledChange(stored, definition, `${name}.disabled`)
          if (problem !== undefined) toggled.push(problem)
          const next = keepDisabled(stored, definition)
          if (sameDefinition(existing.getSnapshot().context.definition, next)) unchanged.push(name)
          else updated.push(name)
          return { name, definition: next }
        })
        if (toggled.length > 0) return yield* ValidationError.of(toggled)
        const total = ctx.host.serviceCount()
        if (added.length > 0 && total + added.length > maxServices) {
          return yield* new TooMany({
            message: `The store holds ${total} of at most ${maxServices} services (max_services); adding ${added.length} more is refused`,
            limit: "max_services",
            max: maxServices,
            retryAfterSeconds: 60
          })
        }
        const changed = kept.filter((e) => !unchanged.includes(e.name))
        if (changed.length > 0) {
          yield* writeFile(ctx, (draft) => {
            for (const { name, definition } of changed) draft.setService(ctx.scope, name, definition)
          })
        }
        for (const { name, definition } of changed) {
          const actor = ownEntry(ctx.actors(), name)
          if (actor) actor.send({ type: "UPDATE_DEFINITION", definition })
          else ctx.host.actor.send({ type: "ADD_SERVICE", scope: ctx.scope, name, definition })
        }
        return { added, updated, unchanged }
      })
    )
    const answer = (outcome: { added: string[]; updated: string[]; unchanged: string[] }): AddServiceResult => ({
      services: entries.flatMap(({ name }) => {
        const actor = ownEntry(ctx.actors(), name)
        return actor ? [serviceView(actor.getSnapshot())] : []
      }),
      ...outcome
    })
    if (waitMs <= 0) return answer(yield* commit)
    // Places for the waits are taken first: once services are added, the wait is not refused.
    return yield* Effect.acquireUseRelease(
      attempt(() => ctx.host.waiters.reserve(entries.length), (e): e is TooMany => e instanceof TooMany),
      (lease) =>
        Effect.gen(function* () {
          const outcome = yield* commit
          yield* Effect.forEach(
            entries,
            ({ name }) => {
              const actor = ownEntry(ctx.actors(), name)
              return actor ? awaitSnapshot(actor, (s) => statusOf(s) !== "initializing", { timeoutMs: waitMs, gate: lease.gate }) : Effect.void
            },
            { concurrency: "unbounded", discard: true }
          )
          const result = answer(outcome)
          return { ...result, ...outcomesOf(result.services) }
        }),
      (lease) => Effect.sync(() => lease.release())
    )
  })

/** Removes a service from the services file and stops it (connection closed, process tree ended). */
export const deleteService = (ctx: ScopeContext, nameOrClientId: string): Effect.Effect<{ readonly service_name: string }, ServiceNotFound | ClusterUnavailable> =>
  ctx.host.serialized(
    Effect.gen(function* () {
      const name = (yield* ctx.service(nameOrClientId)).getSnapshot().context.name
      yield* writeFile(ctx, (draft) => {
        draft.removeService(ctx.scope, name)
      })
      yield* Effect.promise(() => ctx.host.removeActor(ctx.scope, name))
      return { service_name: name }
    })
  )

/** delete_service_two_step: step 1 removes the config entry durably, step 2 stops the actor. */
export const deleteServiceTwoStep = (ctx: ScopeContext, nameOrClientId: string): Effect.Effect<TwoStepDeleteResult, ServiceNotFound> =>
  ctx.host.serialized(
    Effect.gen(function* () {
      const name = (yield* ctx.service(nameOrClientId)).getSnapshot().context.name
      const message = (e: unknown) => (e instanceof Error ? e.message : String(e))
      const step = (run: () => Promise<unknown>) =>
        Effect.tryPromise({ try: run, catch: message }).pipe(Effect.match({ onSuccess: () => null, onFailure: (error) => error }))
      const step1Error = yield* step(() => ctx.host.file.update((draft) => draft.removeService(ctx.scope, name)))
      const step2Error = step1Error === null ? yield* step(() => ctx.host.removeActor(ctx.scope, name)) : "skipped: the config entry could not be removed"
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
  )

/**
 * Health-checks every service of the scope now, concurrently (MCP ping), and feeds each outcome
 * into the service's lifecycle. A service that is not connected is reported as it is.
 */
export const checkServices = (ctx: ScopeContext) =>
  Effect.gen(function* () {
    const timeoutMs = ctx.host.settings.ping_timeout_seconds * 1000
    const services = yield* Effect.forEach(
      Object.values(ctx.actors()),
      (actor) =>
        Effect.gen(function* () {
          const snapshot = actor.getSnapshot()
          const name = snapshot.context.name
          const connection = snapshot.context.connection
          const checked_at = new Date().toISOString()
          if (!isConnected(statusOf(snapshot)) || connection === undefined) {
            return { name, status: statusOf(snapshot), healthy: false, response_time_ms: null, error: snapshot.context.lastError ?? `not connected (${statusOf(snapshot)})`, checked_at }
          }
          const ping = yield* Effect.either(
            Effect.tryPromise({ try: (signal) => connection.ping({ timeoutMs, signal }), catch: (e) => e })
          )
          let report: { ok: boolean; ms: number | null; error: string | null }
          if (ping._tag === "Right") {
            report = { ok: true, ms: Math.round(ping.right * 100) / 100, error: null }
            actor.send({ type: "HEALTH_REPORT", ok: true, responseTimeMs: ping.right })
          } else {
            const e = ping.left
            if (e instanceof McpRequestError && e.kind === "aborted") return yield* Effect.interrupt
            report = { ok: false, ms: null, error: e instanceof Error ? e.message : String(e) }
            if (e instanceof McpRequestError && e.kind === "session_expired") {
              actor.send({ type: "TRANSPORT_CLOSED", reason: `session expired: ${e.message}`, immediate: true })
            } else {
              actor.send({ type: "HEALTH_REPORT", ok: false, error: report.error ?? "health check failed" })
            }
          }
          const status = statusOf(actor.getSnapshot())
          return { name, status, healthy: report.ok && status === "healthy", response_time_ms: report.ms, error: report.error, checked_at }
        }),
      { concurrency: "unbounded" }
    )
    return { services, healthy_count: services.filter((s) => s.healthy).length, total: services.length }
  })

/** Closes the connection and connects afresh, from any status; a `disabled` mark is removed. */
export const restartService = (
  ctx: ScopeContext,
  nameOrClientId: string
): Effect.Effect<{ readonly service_name: string; readonly status: Status }, ServiceNotFound | ClusterUnavailable> =>
  ctx.host.serialized(
    Effect.gen(function* () {
      const actor = yield* ctx.service(nameOrClientId)
      const { name, definition } = actor.getSnapshot().context
      const current = storedDefinition(ctx, name)
      if (current?.disabled === true) {
        const { disabled: _d, ...enabled } = current
        yield* writeFile(ctx, (draft) => draft.setService(ctx.scope, name, enabled))
      }
      if (definition.disabled === true) {
        const { disabled: _d, ...enabled } = definition
        actor.send({ type: "UPDATE_DEFINITION", definition: enabled })
      } else {
        actor.send({ type: "RESTART" })
      }
      return { service_name: name, status: statusOf(actor.getSnapshot()) }
    })
  )

/** Replaces a service's definition (written to the file), and reconnects when it changed. */
export const updateService = (
  ctx: ScopeContext,
  nameOrClientId: string,
  body: UpdateServiceInput,
  options: { readonly local?: LocalServicesPolicy | undefined } = {}
): Effect.Effect<{ readonly service: ServiceView; readonly changed: boolean }, ServiceNotFound | ValidationError | Forbidden | ClusterUnavailable> =>
  ctx.host.serialized(
    Effect.gen(function* () {
      const actor = yield* ctx.service(nameOrClientId)
      const name = actor.getSnapshot().context.name
      const { name: given, ...definition } = body
      if (given !== undefined && given !== name) {
        return yield* ValidationError.of([{ field: "name", problem: `must be '${name}' (the service being updated) or left out` }])
      }
      yield* attempt(() => refuseLocal([{ name: name as ServiceName, definition }], options.local), isRefusal)
      const stored = storedDefinition(ctx, name)
      const toggled = disabledChange(stored, definition, "disabled")
      if (toggled !== undefined) return yield* ValidationError.of([toggled])
      const next = keepDisabled(stored, definition)
      const changed = !sameDefinition(actor.getSnapshot().context.definition, next)
      if (changed) {
        yield* writeFile(ctx, (draft) => draft.setService(ctx.scope, name, next))
        actor.send({ type: "UPDATE_DEFINITION", definition: next })
      }
      return { service: serviceView(actor.getSnapshot()), changed }
    })
  )

/**
 * Graceful disconnect: `disconnecting`, then `disconnected` once the transport is closed. The
 * config entry stays, marked `"disabled": true`, so it stays disconnected after a restart.
 */
export const disconnectService = (
  ctx: ScopeContext,
  nameOrClientId: string,
  reason?: string
): Effect.Effect<{ readonly service_name: string; readonly status: Status }, ServiceNotFound | TooMany | ClusterUnavailable> =>
  Effect.gen(function* () {
    const actor = yield* ctx.host.serialized(
      Effect.gen(function* () {
        const actor = yield* ctx.service(nameOrClientId)
        const { name, definition } = actor.getSnapshot().context
        yield* writeFile(ctx, (draft) => draft.setService(ctx.scope, name, { ...definition, disabled: true }))
        actor.send({ type: "DISCONNECT", reason: reason ?? "disconnect requested" })
        return actor
      })
    )
    const timeoutMs = (ctx.host.settings.disconnection_timeout_seconds + 1) * 1000
    yield* awaitSnapshot(actor, (s) => statusOf(s) === "disconnected", { timeoutMs })
    return { service_name: actor.getSnapshot().context.name, status: statusOf(actor.getSnapshot()) }
  })

/** Lists the tools again now, for one service or every connected service of the scope. */
export const refreshTools = (ctx: ScopeContext, serviceName?: string) =>
  Effect.gen(function* () {
    const actors = serviceName !== undefined ? [yield* ctx.service(serviceName)] : Object.values(ctx.actors())
    const timeoutMs = ctx.host.settings.ping_timeout_seconds * 1000 + 1000
    return yield* Effect.forEach(
      actors,
      (actor) =>
        Effect.gen(function* () {
          const before = actor.getSnapshot().context
          const names = (tools: ReadonlyArray<{ name: string }>) => tools.map((t) => t.name).sort().join("\n")
          if (isConnected(statusOf(actor.getSnapshot()))) {
            actor.send({ type: "REFRESH_TOOLS" })
            yield* awaitSnapshot(actor, (s) => s.context.toolsVersion > before.toolsVersion || !isConnected(statusOf(s)), { timeoutMs })
          }
          const after = actor.getSnapshot().context
          const status = statusOf(actor.getSnapshot())
          return {
            service_name: after.name,
            tool_count: after.tools.length,
            changed: names(after.tools) !== names(before.tools),
            status,
            error: isConnected(status) ? null : `not connected (${status})`
          }
        }),
      { concurrency: "unbounded" }
    )
  })

/** Stops and removes every service of this scope (agent scope; the store uses `Store.resetConfig`). */
export const resetAgent = (ctx: ScopeContext): Effect.Effect<number, ClusterUnavailable> => {
  if (ctx.scope.kind !== "agent") return definitionsChange(() => ctx.host.resetConfig("store"))
  const agentId = ctx.scope.agentId
  return ctx.host.serialized(
    Effect.gen(function* () {
      const names = Object.keys(ctx.actors())
      yield* writeFile(ctx, (draft) => {
        draft.removeAgent(agentId)
      })
      yield* Effect.promise(() => Promise.all(names.map((name) => ctx.host.removeActor(ctx.scope, name))))
      return names.length
    })
  )
}
