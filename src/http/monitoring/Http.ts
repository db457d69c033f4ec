/**
 * The monitoring group's handlers: each one computes its figures (src/monitoring/figures.ts) as an
 * Effect. Figures are reads of in-memory state (synchronous, cannot fail) or of /proc and the disk
 * (a failure there is a bug); the two that can fail for a client's reason fail with a store error,
 * mapped to its contract error by `contract`, the one mapping.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import { Effect, type Layer } from "effect"
import * as Figures from "../../monitoring/figures.js"
import { Api } from "../Api.js"
import { App } from "../context.js"
import { ServiceNotFound, ValidationError } from "../../domain/errors.js"
import { attempt } from "../../runtime/run.js"
import { errorBody, contract, Forbidden } from "../contract-errors.js"
import { narrowFor, PrincipalTag } from "../access.js"

/** The query's narrowing, or the principal's own when it is an agent key's (403 for another agent's figures). */
const narrowed = <N extends { readonly agent_id?: string | undefined }>(query: N) =>
  Effect.flatMap(PrincipalTag, (principal) => {
    const n = narrowFor(principal, query)
    return "forbidden" in n ? Effect.fail(new Forbidden(errorBody("FORBIDDEN", n.forbidden, {}))) : Effect.succeed(n.narrowing)
  })

// The group's type, written out: the declaration emit (npm run build) would otherwise infer it from
// every handler, and the type-check holds the handlers to it.
export const MonitoringHttpLive: Layer.Layer<HttpApiGroup.ApiGroup<"mcp-store", "monitoring">, never, App> = HttpApiBuilder.group(Api, "monitoring", (handlers) =>
  Effect.gen(function* () {
    const app = yield* App
    const { store, storeOptions } = app
    const retention = storeOptions.toolRecordRetentionDays
    const ok = <A extends object>(message: string, body: A) => ({ success: true, message, ...body })
    const figures = <A extends object>(message: string, read: () => A) => Effect.sync(() => ok(message, read()))
    return handlers
      .handle("agentsSummary", ({ urlParams }) =>
        Effect.flatMap(narrowed(urlParams), (n) => figures("Agents summary", () => Figures.agentsSummary(store, n)))
      )
      .handle("config", () => figures("Monitoring settings", () => ({ config: { ...store.settings } })))
      // Sent as JSON as it is: `by_scope` is keyed by agent id, and the schema encoding pass copies a
      // record key by key onto a plain object, where the valid agent id "__proto__" would set the
      // copy's prototype instead of adding a key.
      .handle("servicesStatusDistribution", ({ urlParams }) =>
        Effect.map(
          Effect.flatMap(narrowed(urlParams), (n) => figures("Status distribution", () => Figures.statusDistribution(store, n))),
          (answer) => HttpServerResponse.unsafeJson(answer)
        )
      )
      .handle("toolsUsageStats", ({ urlParams }) =>
        Effect.flatMap(narrowed(urlParams), (n) => figures("Tool usage", () => Figures.toolsUsage(store, urlParams.limit ?? 20, n)))
      )
      .handle("systemPerformance", () => Effect.promise(() => Figures.systemPerformance(app)).pipe(Effect.map((figures) => ok("System performance", figures))))
      .handle("servicesResponseTime", ({ urlParams }) => Effect.flatMap(narrowed(urlParams), (n) => figures("Response times", () => Figures.responseTimes(app, n))))
      .handle("errorRateStats", ({ urlParams }) =>
        Effect.flatMap(narrowed(urlParams), (n) => figures("Error rates", () => Figures.errorRates(store, urlParams.minutes ?? 60, n)))
      )
      .handle("historicalStats", ({ urlParams: query }) =>
        Effect.flatMap(narrowed(query), (urlParams) => contract(
          Effect.suspend(() => {
            const days = urlParams.days ?? (retention < 0 ? 7 : Math.max(1, Math.min(7, retention)))
            return retention >= 0 && days > retention
              ? Effect.fail(ValidationError.of([{ field: "days", problem: `must be at most the tool-record retention (${retention} days)` }]))
              : Effect.sync(() => ok("Calls per day", { days: store.records.daily(days, Date.now(), urlParams) }))
          })
        ))
      )
      .handle("serviceHealthHistory", ({ urlParams: query }) =>
        Effect.flatMap(narrowed(query), (urlParams) =>
          contract(
            attempt(
              () => ok("Health history", Figures.healthHistory(app, urlParams.service_name, urlParams.agent_id, urlParams.hours ?? 24)),
              (e): e is ServiceNotFound => e instanceof ServiceNotFound
            )
          )
        )
      )
      .handle("toolCallHistory", ({ urlParams }) =>
        Effect.flatMap(narrowed(urlParams), (n) => figures("Recent tool calls", () => Figures.callHistory(store, urlParams.limit ?? 100, n)))
      )
      .handle("realtimeStatus", () => figures("Real-time status", () => Figures.realtimeStatus(app)))
      .handle("activeConnections", () => figures("Active connections", () => Figures.activeConnections(app)))
      .handle("resourceUsage", () => Effect.promise(() => Figures.resourceUsage(store)).pipe(Effect.map((figures) => ok("Resource usage", figures))))
      .handle("alerts", ({ urlParams }) =>
        Effect.flatMap(narrowed(urlParams), (n) => figures("Alerts", () => Figures.alertList(app, urlParams.limit ?? 50, urlParams.include_resolved ?? true, n)))
      )
  })
)
