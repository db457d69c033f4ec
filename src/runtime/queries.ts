/**
 * The queries of a scope: its services, tools, health and statistics read from the actors'
 * snapshots and the records, and `waitService`, which watches a service until it reaches a status.
 * None of them changes anything.
 */
import { Effect, FiberRef } from "effect"
import { requestSpan } from "../logging/tracing.js"
import { newSpanId } from "../domain/trace-context.js"
import { dict } from "../domain/dict.js"
import { maskDefinition, maskDocument } from "../domain/secrets.js"
import { STATUSES, type Status } from "../domain/service-definition.js"
import { statusOf, type ServiceSnapshot } from "../machines/service.js"
import { ownEntry } from "../machines/supervisor.js"
import type { RecordQuery } from "../records/tool-records.js"
import { awaitSnapshot } from "./bridge.js"
import type { ServiceNotFound, TooMany } from "../domain/errors.js"
import type { ScopeContext } from "./host.js"
import { heldToolViews, hiddenToolViews, isConnected, iso, serviceView, toolViews, toolViewsFor, transitionView, type ServiceView, type ToolView } from "./service-views.js"

export interface WaitServiceInput {
  readonly client_id_or_service_name: string
  /** Decoded at the edge (src/http/payloads.ts `WaitStatus`): a status, or a non-empty array of them. */
  readonly status: Status | ReadonlyArray<Status>
  /** Seconds. */
  readonly timeout: number
}

export interface WaitServiceOutput {
  readonly result: boolean
  readonly final_status: Status | "deleted"
  readonly elapsed_ms: number
}

/** Every service of this scope, in list form. */
export const listServices = (ctx: ScopeContext): Effect.Effect<ReadonlyArray<ServiceView>> =>
  Effect.sync(() => Object.values(ctx.actors()).map((a) => gatedView(ctx, a.getSnapshot())))

/** A service's list form as the caller sees it: `tool_count` counts the tools its key's list lets through. */
const gatedView = (ctx: ScopeContext, snapshot: ServiceSnapshot): ServiceView => {
  const view = serviceView(snapshot)
  return ctx.gate === undefined ? view : { ...view, tool_count: toolViewsFor(snapshot, ctx.gate).length }
}

/** Every tool of this scope (callable names), or of one service. */
export const listTools = (ctx: ScopeContext, serviceName?: string): Effect.Effect<ReadonlyArray<ToolView>, ServiceNotFound> =>
  serviceName !== undefined
    ? Effect.map(ctx.service(serviceName), (a) => toolViewsFor(a.getSnapshot(), ctx.gate))
    : Effect.sync(() => Object.values(ctx.actors()).flatMap((a) => toolViewsFor(a.getSnapshot(), ctx.gate)))

/** One service in detail: its list form, its definition (secrets masked), its tools. */
export const getServiceInfo = (ctx: ScopeContext, nameOrClientId: string) =>
  Effect.map(ctx.service(nameOrClientId), (actor) => {
    const snapshot = actor.getSnapshot()
    const view = gatedView(ctx, snapshot)
    return {
      service: { ...view, config: maskDefinition(snapshot.context.definition) },
      tools: toolViewsFor(snapshot, ctx.gate),
      hidden_tools:
        ctx.gate === undefined
          ? hiddenToolViews(snapshot)
          : [
              ...hiddenToolViews(snapshot),
              ...toolViews(snapshot)
                .filter((t) => !ctx.gate!.allows(t.name))
                .map((t) => ({ name: t.name, original_name: t.original_name, reason: KEY_LIST_REASON }))
            ],
      // Tools held by their pins (docs/tool-pins.md), with their diffs; a key's list narrows them too.
      held_tools: ctx.gate === undefined ? heldToolViews(snapshot) : heldToolViews(snapshot).filter((t) => ctx.gate!.allows(t.name)),
      // What it offers beside tools (src/runtime/catalog.ts lists them: list_resources, list_prompts).
      catalog: {
        resources: snapshot.context.catalog.resources.length,
        resource_templates: snapshot.context.catalog.resourceTemplates.length,
        prompts: snapshot.context.catalog.prompts.length
      },
      connected: isConnected(view.status)
    }
  })

/** Why a tool is hidden from a caller whose key's list leaves it out. */
export const KEY_LIST_REASON = "this key's tools list does not match it"

/** Count of services per status (all seven keys). */
const countStatuses = (ctx: ScopeContext): Record<Status, number> => {
  const counts = Object.fromEntries(STATUSES.map((s) => [s, 0])) as Record<Status, number>
  for (const a of Object.values(ctx.actors())) counts[statusOf(a.getSnapshot())] += 1
  return counts
}

/** Count of services per status (all seven keys). */
export const statusCounts = (ctx: ScopeContext): Effect.Effect<Record<Status, number>> => Effect.sync(() => countStatuses(ctx))

/** The scope's health: healthy when every enabled service is, degraded when some are not, unhealthy when none is. */
export const health = (ctx: ScopeContext) =>
  Effect.sync(() => {
    const services = countStatuses(ctx)
    const enabled = Object.values(ctx.actors()).filter((a) => a.getSnapshot().context.definition.disabled !== true)
    const healthy = enabled.filter((a) => statusOf(a.getSnapshot()) === "healthy").length
    const status = healthy === enabled.length ? "healthy" : healthy === 0 ? "unhealthy" : "degraded"
    return {
      status: status as "healthy" | "degraded" | "unhealthy",
      services,
      total_services: Object.keys(ctx.actors()).length,
      uptime_seconds: Math.round((Date.now() - ctx.host.startedAt) / 10) / 100
    }
  })

/** Statistics of the scope: services, tools, and tool calls from the records' aggregates. */
export const stats = (ctx: ScopeContext) =>
  Effect.sync(() => {
    const snapshots = Object.values(ctx.actors()).map((a) => a.getSnapshot())
    const summary = ctx.host.records.summary([ctx.label])
    return {
      total_services: snapshots.length,
      total_tools: snapshots.reduce((n, s) => n + toolViewsFor(s, ctx.gate).length, 0),
      healthy_services: snapshots.filter((s) => statusOf(s) === "healthy").length,
      services_by_status: countStatuses(ctx),
      tools_by_service: dict(snapshots.map((s) => [s.context.name, toolViewsFor(s, ctx.gate).length])),
      tool_calls: {
        total: summary.total_executions,
        succeeded: summary.succeeded,
        failed: summary.failed,
        avg_duration_ms: summary.avg_duration_ms
      }
    }
  })

/** The scope's part of the services file, as stored (the store: the whole file). */
export const mcpConfig = (ctx: ScopeContext, reveal = false): Effect.Effect<unknown> =>
  Effect.sync(() => {
    const doc = ctx.scope.kind === "store" ? ctx.host.file.raw() : { mcpServers: ownEntry(ctx.host.file.read().agents, ctx.scope.agentId) ?? dict() }
    return reveal ? doc : maskDocument(doc)
  })

/** Lifecycle detail of one service (service_status). */
export const serviceStatus = (ctx: ScopeContext, nameOrClientId: string) =>
  Effect.map(ctx.service(nameOrClientId), (actor) => {
    const snapshot = actor.getSnapshot()
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
      hint: c.hint ?? null,
      last_health_check_at: iso(c.lastHealthCheckAt),
      response_time_ms: c.responseTimeMs === undefined ? null : Math.round(c.responseTimeMs * 100) / 100,
      state_entered_at: new Date(c.stateEnteredAt).toISOString(),
      transitions: c.transitions.map(transitionView),
      stderr_tail: [...stderr],
      protocol_version: c.era?.version ?? null,
      ...(c.auth !== undefined ? { auth: c.auth } : {})
    }
  })

/**
 * Waits until a service has one of the statuses (at once if it already has), the time-out passes,
 * or the service is deleted. Event-driven: answers the moment the status changes; interrupted (the
 * client went away), it stops waiting at once.
 */
export const waitService = (
  ctx: ScopeContext,
  input: WaitServiceInput
): Effect.Effect<WaitServiceOutput, ServiceNotFound | TooMany> =>
  Effect.gen(function* () {
    const actor = yield* ctx.service(input.client_id_or_service_name)
    const wanted = new Set<Status>(typeof input.status === "string" ? [input.status] : input.status)
    const waiting = awaitSnapshot(actor, (s) => wanted.has(statusOf(s)), { timeoutMs: input.timeout * 1000, gate: ctx.host.waiters })
    const tracer = ctx.host.tracer
    // Tracing on: the wait's span, under the request's (src/http/request-span.ts).
    const parent = tracer.enabled ? yield* FiberRef.get(requestSpan) : undefined
    const startMs = performance.now()
    const outcome = yield* waiting
    if (parent !== undefined) {
      const name = actor.getSnapshot().context.name
      tracer.record({
        name: `wait ${name}`,
        kind: "internal",
        context: { traceId: parent.traceId, spanId: newSpanId(), parentSpanId: parent.spanId, flags: parent.flags },
        startMs,
        endMs: performance.now(),
        attributes: { "mcp_store.wait.services": name, "mcp_store.wait.until": [...wanted].join(","), "mcp_store.outcome": outcome.end, "mcp_store.scope": ctx.label }
      })
    }
    return {
      result: outcome.end === "reached",
      final_status: outcome.end === "stopped" ? ("deleted" as const) : statusOf(outcome.snapshot as ServiceSnapshot),
      elapsed_ms: Math.round(outcome.elapsedMs * 100) / 100
    }
  })

/** Tool-call records of this scope (or of every scope with `all`), newest first, with a summary. */
export const toolRecords = (ctx: ScopeContext, query: Omit<RecordQuery, "scope">, all = false) =>
  Effect.promise(async () => {
    const scope = all ? undefined : ctx.label
    const page = await ctx.host.records.query({ ...query, scope })
    const scopes = all ? undefined : [ctx.label]
    const { by_tool, by_service, total_executions } = ctx.host.records.summary(scopes)
    return { ...page, summary: { total_executions, by_tool, by_service } }
  })
