/**
 * The monitoring group's handlers: each one computes its figures (src/monitoring/figures.ts) as an
 * Effect. Figures are reads of in-memory state (synchronous, cannot fail) or of /proc and the disk
 * (a failure there is a bug); the two that can fail for a client's reason fail with a store error,
 * mapped to its contract error by `contract`, the one mapping.
 */
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import * as Figures from "../../monitoring/figures.js"
import { Api } from "../Api.js"
import { App } from "../context.js"
import { ServiceNotFound, ValidationError } from "../../runtime/errors.js"
import { attempt } from "../../runtime/run.js"
import { contract } from "../errors.js"

export const MonitoringHttpLive = HttpApiBuilder.group(Api, "monitoring", (handlers) =>
  Effect.gen(function* () {
    const app = yield* App
    const { store, storeOptions } = app
    const retention = storeOptions.toolRecordRetentionDays
    const ok = <A extends object>(message: string, body: A) => ({ success: true, message, ...body })
    const figures = <A extends object>(message: string, read: () => A) => Effect.sync(() => ok(message, read()))
    return handlers
      .handle("agentsSummary", () => figures("Agents summary", () => Figures.agentsSummary(store)))
      .handle("config", () => figures("Monitoring settings", () => ({ config: { ...store.settings } })))
      // Sent as JSON as it is: `by_scope` is keyed by agent id, and the schema encoding pass copies a
      // record key by key onto a plain object, where the valid agent id "__proto__" would set the
      // copy's prototype instead of adding a key.
      .handle("servicesStatusDistribution", () =>
        Effect.map(
          figures("Status distribution", () => Figures.statusDistribution(store)),
          (answer) => HttpServerResponse.unsafeJson(answer)
        )
      )
      .handle("toolsUsageStats", ({ urlParams }) =>
        figures("Tool usage", () => Figures.toolsUsage(store, urlParams.limit ?? 20, urlParams))
      )
      .handle("systemPerformance", () => Effect.promise(() => Figures.systemPerformance(app)).pipe(Effect.map((figures) => ok("System performance", figures))))
      .handle("servicesResponseTime", ({ urlParams }) => figures("Response times", () => Figures.responseTimes(app, urlParams)))
      .handle("errorRateStats", ({ urlParams }) =>
        figures("Error rates", () => Figures.errorRates(store, urlParams.minutes ?? 60, urlParams))
      )
      .handle("historicalStats", ({ urlParams }) =>
        contract(
          Effect.suspend(() => {
            const days = urlParams.days ?? (retention < 0 ? 7 : Math.max(1, Math.min(7, retention)))
            return retention >= 0 && days > retention
              ? Effect.fail(ValidationError.of([{ field: "days", problem: `must be at most the tool-record retention (${retention} days)` }]))
              : Effect.sync(() => ok("Calls per day", { days: store.records.daily(days) }))
          })
        )
      )
      .handle("serviceHealthHistory", ({ urlParams }) =>
        contract(
          attempt(
            () => ok("Health history", Figures.healthHistory(app, urlParams.service_name, urlParams.agent_id, urlParams.hours ?? 24)),
            (e): e is ServiceNotFound => e instanceof ServiceNotFound
          )
        )
      )
      .handle("toolCallHistory", ({ urlParams }) =>
        figures("Recent tool calls", () => Figures.callHistory(store, urlParams.limit ?? 100, urlParams))
      )
      .handle("realtimeStatus", () => figures("Real-time status", () => Figures.realtimeStatus(app)))
      .handle("activeConnections", () => figures("Active connections", () => Figures.activeConnections(app)))
      .handle("resourceUsage", () => Effect.promise(() => Figures.resourceUsage(store)).pipe(Effect.map((figures) => ok("Resource usage", figures))))
      .handle("alerts", ({ urlParams }) =>
        figures("Alerts", () => Figures.alertList(app, urlParams.limit ?? 50, urlParams.include_resolved ?? true, urlParams))
      )
  })
)
