/** The monitoring group's contract: 14 read-only endpoints under `/monitoring` (docs/api.md). */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { ScopeLabel, ServiceRef, Transition } from "../../domain/schemas.js"
import { ToolRecord, ok } from "../payloads.js"

const Int = (min: number, max: number) => Schema.NumberFromString.pipe(Schema.int(), Schema.between(min, max))
const Num = (min: number, max: number) => Schema.NumberFromString.pipe(Schema.between(min, max))
const Counts = Schema.Record({ key: Schema.String, value: Schema.Number })
const Narrowing = {
  agent_id: Schema.optional(ScopeLabel),
  service_name: Schema.optional(ServiceRef)
}

const get = <N extends string>(name: N, path: string, summary: string) =>
  HttpApiEndpoint.get(name, `/monitoring/${path}` as `/${string}`).annotate(OpenApi.Summary, summary)

export class MonitoringApi extends HttpApiGroup.make("monitoring")
  .add(
    get("agentsSummary", "agents_summary", "Every agent's services, tools and activity").setUrlParams(Schema.Struct(Narrowing)).addSuccess(
      Schema.Struct({
        ...ok,
        total_agents: Schema.Number,
        active_agents: Schema.Number,
        total_services: Schema.Number,
        total_tools: Schema.Number,
        store_services: Schema.Number,
        store_tools: Schema.Number,
        agents: Schema.Array(
          Schema.Struct({
            agent_id: Schema.String,
            service_count: Schema.Number,
            tool_count: Schema.Number,
            healthy_services: Schema.Number,
            unhealthy_services: Schema.Number,
            total_tool_executions: Schema.Number,
            last_activity: Schema.NullOr(Schema.String)
          })
        )
      })
    )
  )
  .add(get("config", "config", "Effective monitoring settings and lifecycle constants").addSuccess(Schema.Struct({ ...ok, config: Schema.Record({ key: Schema.String, value: Schema.Union(Schema.Number, Schema.Boolean) }) })))
  .add(
    get("servicesStatusDistribution", "services_status_distribution", "Services per status, in all and per scope").setUrlParams(Schema.Struct(Narrowing)).addSuccess(
      Schema.Struct({ ...ok, total_services: Schema.Number, distribution: Counts, by_scope: Schema.Record({ key: Schema.String, value: Counts }) })
    )
  )
  .add(
    get("toolsUsageStats", "tools_usage_stats", "Calls per tool, most called first")
      .setUrlParams(Schema.Struct({ limit: Schema.optional(Int(1, 1000)), ...Narrowing }))
      .addSuccess(
        Schema.Struct({
          ...ok,
          tools: Schema.Array(
            Schema.Struct({
              tool_name: Schema.String,
              service_name: Schema.String,
              scope: Schema.String,
              call_count: Schema.Number,
              success_count: Schema.Number,
              error_count: Schema.Number,
              success_rate: Schema.Number,
              avg_duration_ms: Schema.Number,
              p95_duration_ms: Schema.Number,
              last_called_at: Schema.String
            })
          ),
          total_tools: Schema.Number
        })
      )
  )
  .add(
    get("systemPerformance", "system_performance", "API request rate and latency, event-loop lag, CPU and memory").addSuccess(
      Schema.Struct({
        ...ok,
        requests_total: Schema.Number,
        requests_per_second: Schema.Number,
        latency_ms: Schema.Struct({ p50: Schema.Number, p95: Schema.Number, p99: Schema.Number }),
        event_loop_lag_ms: Schema.Number,
        cpu_percentage: Schema.Number,
        memory_rss: Schema.Number,
        heap_used: Schema.Number,
        uptime_seconds: Schema.Number
      })
    )
  )
  .add(
    get("servicesResponseTime", "services_response_time", "Response times per service, from health checks and tool calls")
      .setUrlParams(Schema.Struct(Narrowing))
      .addSuccess(
        Schema.Struct({
          ...ok,
          services: Schema.Array(
            Schema.Struct({
              service_name: Schema.String,
              scope: Schema.String,
              last_ms: Schema.NullOr(Schema.Number),
              avg_ms: Schema.NullOr(Schema.Number),
              p50_ms: Schema.NullOr(Schema.Number),
              p95_ms: Schema.NullOr(Schema.Number),
              samples: Schema.Number
            })
          )
        })
      )
  )
  .add(
    get("errorRateStats", "error_rate_stats", "Failed calls over the last minutes")
      .setUrlParams(Schema.Struct({ minutes: Schema.optional(Num(1, 10_080)), ...Narrowing }))
      .addSuccess(
        Schema.Struct({
          ...ok,
          minutes: Schema.Number,
          total_calls: Schema.Number,
          failed_calls: Schema.Number,
          error_rate: Schema.Number,
          by_outcome: Counts,
          by_service: Schema.Record({
            key: Schema.String,
            value: Schema.Struct({ calls: Schema.Number, errors: Schema.Number, error_rate: Schema.Number })
          })
        })
      )
  )
  .add(
    get("historicalStats", "historical_stats", "Calls per day, a row for every day")
      .setUrlParams(Schema.Struct({ days: Schema.optional(Int(1, 365)), ...Narrowing }))
      .addSuccess(
        Schema.Struct({
          ...ok,
          days: Schema.Array(Schema.Struct({ date: Schema.String, calls: Schema.Number, errors: Schema.Number, avg_duration_ms: Schema.Number }))
        })
      )
  )
  .add(
    get("serviceHealthHistory", "service_health_history", "A service's status transitions and health checks")
      .setUrlParams(Schema.Struct({ service_name: ServiceRef, agent_id: Narrowing.agent_id, hours: Schema.optional(Num(0.001, 168)) }))
      .addSuccess(
        Schema.Struct({
          ...ok,
          service_name: Schema.String,
          scope: Schema.String,
          hours: Schema.Number,
          transitions: Schema.Array(Transition),
          checks: Schema.Array(
            Schema.Struct({ at: Schema.String, ok: Schema.Boolean, response_time_ms: Schema.NullOr(Schema.Number), error: Schema.NullOr(Schema.String) })
          )
        })
      )
  )
  .add(
    get("toolCallHistory", "tool_call_history", "The most recent tool calls of every scope")
      .setUrlParams(Schema.Struct({ limit: Schema.optional(Int(1, 1000)), ...Narrowing }))
      .addSuccess(Schema.Struct({ ...ok, calls: Schema.Array(ToolRecord) }))
  )
  .add(
    get("realtimeStatus", "realtime_status", "Services per status, calls in flight and in the last minute").addSuccess(
      Schema.Struct({
        ...ok,
        timestamp: Schema.String,
        services: Counts,
        in_flight_calls: Schema.Number,
        calls_last_minute: Schema.Number,
        errors_last_minute: Schema.Number,
        active_connections: Schema.Number
      })
    )
  )
  .add(
    get("activeConnections", "active_connections", "Open client sockets, upstream sessions, local processes, event subscribers").addSuccess(
      Schema.Struct({
        ...ok,
        http_connections: Schema.Number,
        upstream_sessions: Schema.Number,
        stdio_processes: Schema.Number,
        event_subscribers: Schema.Number
      })
    )
  )
  .add(
    get("resourceUsage", "resource_usage", "Process, system and disk resources").addSuccess(
      Schema.Struct({
        ...ok,
        process: Schema.Struct({ rss: Schema.Number, heap_used: Schema.Number, heap_total: Schema.Number, cpu_percentage: Schema.Number }),
        system: Schema.Struct({
          memory_total: Schema.Number,
          memory_free: Schema.Number,
          load_average: Schema.Array(Schema.Number),
          cpus: Schema.Number
        }),
        disk: Schema.Struct({ total: Schema.Number, used: Schema.Number, percentage: Schema.Number })
      })
    )
  )
  .add(
    get("alerts", "alerts", "Alerts raised by the lifecycle, newest first")
      .setUrlParams(
        Schema.Struct({
          limit: Schema.optional(Int(1, 1000)),
          include_resolved: Schema.optional(Schema.BooleanFromString),
          ...Narrowing
        })
      )
      .addSuccess(
        Schema.Struct({
          ...ok,
          alerts: Schema.Array(
            Schema.Struct({
              alert_id: Schema.String,
              level: Schema.Literal("info", "warning", "error"),
              title: Schema.String,
              message: Schema.String,
              service_name: Schema.String,
              scope: Schema.String,
              timestamp: Schema.String,
              resolved: Schema.Boolean,
              resolved_at: Schema.NullOr(Schema.String)
            })
          ),
          total: Schema.Number,
          unresolved: Schema.Number
        })
      )
  ) {}
