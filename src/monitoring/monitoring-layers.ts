/**
 * The monitoring as Effect services in the store's layer graph: the monitor, acquired before the
 * store (the store's actor inspection feeds it) and released after it; and what watches the store
 * once it runs: every call record fed to the monitor, the Prometheus metrics, and in replica mode
 * the cluster's shared alerts, each raised by the replica that runs its service.
 */
import { Context, Effect, Layer, Option } from "effect"
import { clusterOf } from "../composition/layer-graph.js"
import { serviceField } from "../redis/key-names.js"
import { StoreService } from "../runtime/store.js"
import { createMetrics, type Metrics } from "./metrics.js"
import { Monitor } from "./monitor.js"
import { SharedAlerts } from "./shared-alerts.js"

/** The store's monitor (histories, checks, alerts, the figures of the monitoring routes). */
export class MonitorService extends Context.Tag("mcp-store/Monitor")<MonitorService, Monitor>() {}

/** The Prometheus metrics of the store and its monitor. */
export class MetricsService extends Context.Tag("mcp-store/Metrics")<MetricsService, Metrics>() {}

/** The monitor: made first, stopped last. */
export const MonitorLive = Layer.scoped(
  MonitorService,
  Effect.acquireRelease(
    Effect.sync(() => new Monitor()),
    (monitor) => Effect.sync(() => monitor.stop())
  )
)

/** The store watched: records to the monitor, the metrics, and in replica mode the shared alerts. */
export const MetricsLive = Layer.scoped(
  MetricsService,
  Effect.gen(function* () {
    const store = yield* StoreService
    const monitor = yield* MonitorService
    const cluster = Option.getOrUndefined(yield* clusterOf)
    if (cluster !== undefined) {
      const data = { client: cluster.connection.client, cluster: cluster.options.name }
      const alerts = yield* Effect.acquireRelease(
        Effect.promise(() => SharedAlerts.open(data)),
        (alerts) => Effect.promise(() => alerts.close())
      )
      alerts.attach(monitor, (scope, name) => cluster.owns(serviceField(scope === "store" ? { kind: "store" } : { kind: "agent", agentId: scope }, name)))
    }
    // A call refused as unavailable never reached the service: it is not a response time.
    const unrecord = store.records.onRecord((r) => {
      if (r.outcome !== "unavailable") monitor.recordCall(r.scope === "store" ? "store" : (r.agent_id ?? ""), r.service_name, r.duration_ms)
    })
    yield* Effect.addFinalizer(() => Effect.sync(unrecord))
    return yield* Effect.acquireRelease(
      Effect.sync(() => createMetrics(store, monitor)),
      (metrics) => Effect.sync(() => metrics.close())
    )
  })
)
