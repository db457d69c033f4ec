/** The monitoring group's handlers: each one computes its figures (src/monitoring/figures.ts). */
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import * as Figures from "../../monitoring/figures.js"
import { Api } from "../Api.js"
import { App } from "../context.js"
import { ValidationError } from "../../runtime/errors.js"
import { run } from "../errors.js"

export const MonitoringHttpLive = HttpApiBuilder.group(Api, "monitoring", (handlers) =>
  Effect.gen(function* () {
    const app = yield* App
    const { store, storeOptions } = app
    const retention = storeOptions.toolRecordRetentionDays
    const ok = <A extends object>(message: string, body: A) => ({ success: true, message, ...body })
    return handlers
      .handle("agentsSummary", () => run(() => ok("Agents summary", Figures.agentsSummary(store))))
      .handle("config", () => run(() => ok("Monitoring settings", { config: { ...store.settings } })))
      // Sent as JSON as it is: `by_scope` is keyed by agent id, and the schema encoding pass copies a
      // record key by key onto a plain object, where the valid agent id "__proto__" would set the
      // copy's prototype instead of adding a key.
      .handle("servicesStatusDistribution", () =>
        Effect.map(
          run(() => ok("Status distribution", Figures.statusDistribution(store))),
          (answer) => HttpServerResponse.unsafeJson(answer)
        )
      )
      .handle("toolsUsageStats", ({ urlParams }) =>
        run(() => ok("Tool usage", Figures.toolsUsage(store, urlParams.limit ?? 20, urlParams)))
      )
      .handle("systemPerformance", () => run(async () => ok("System performance", await Figures.systemPerformance(app))))
      .handle("servicesResponseTime", ({ urlParams }) => run(() => ok("Response times", Figures.responseTimes(app, urlParams))))
      .handle("errorRateStats", ({ urlParams }) =>
        run(() => ok("Error rates", Figures.errorRates(store, urlParams.minutes ?? 60, urlParams)))
      )
      .handle("historicalStats", ({ urlParams }) =>
        run(() => {
          const days = urlParams.days ?? (retention < 0 ? 7 : Math.max(1, Math.min(7, retention)))
          if (retention >= 0 && days > retention) {
            throw ValidationError.of([{ field: "days", problem: `must be at most the tool-record retention (${retention} days)` }])
          }
          return ok("Calls per day", { days: store.records.daily(days) })
        })
      )
      .handle("serviceHealthHistory", ({ urlParams }) =>
        run(() => ok("Health history", Figures.healthHistory(app, urlParams.service_name, urlParams.agent_id, urlParams.hours ?? 24)))
      )
      .handle("toolCallHistory", ({ urlParams }) =>
        run(() => ok("Recent tool calls", Figures.callHistory(store, urlParams.limit ?? 100, urlParams)))
      )
      .handle("realtimeStatus", () => run(() => ok("Real-time status", Figures.realtimeStatus(app))))
      .handle("activeConnections", () => run(() => ok("Active connections", Figures.activeConnections(app))))
      .handle("resourceUsage", () => run(async () => ok("Resource usage", await Figures.resourceUsage(store))))
      .handle("alerts", ({ urlParams }) =>
        run(() => ok("Alerts", Figures.alertList(app, urlParams.limit ?? 50, urlParams.include_resolved ?? true, urlParams)))
      )
  })
)
