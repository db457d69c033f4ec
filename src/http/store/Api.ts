/** The store group's contract: endpoints, payloads and errors of `/for_store` (docs/api.md). */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { ServiceRef, Status, Transition, UpdateServiceBody } from "../../domain/schemas.js"
import {
  CallPath,
  ListServicesResponse,
  PROTOCOL_VERSION_FIELD,
  RecordsQuery,
  ResetResponse,
  Service,
  ServiceAuth,
  ServiceNamePayload,
  ServicePath,
  TwoStepDeleteResponse,
  closed,
  ok,
  optionalBody,
  scopeEndpoints
} from "../payloads.js"
import { acceptToolChangesEndpoint } from "../tool-pins-routes.js"
import { credentialsEndpoints, CredentialsPath } from "../credentials-routes.js"

const shared = scopeEndpoints("/for_store")

export const NetworkCheckPayload = closed({
  endpoints: Schema.Array(
    Schema.Union(
      Schema.String.pipe(Schema.maxLength(2048)),
      Schema.Struct({ name: Schema.String.pipe(Schema.maxLength(256)), url: Schema.String.pipe(Schema.maxLength(2048)) })
    )
  ).pipe(Schema.minItems(1), Schema.maxItems(50))
})

export const NetworkCheckResult = Schema.Struct({
  endpoint_name: Schema.String,
  url: Schema.String,
  reachable: Schema.Boolean,
  status: Schema.Literal("healthy", "warning", "error"),
  http_status: Schema.NullOr(Schema.Number),
  response_time_ms: Schema.NullOr(Schema.Number),
  error: Schema.NullOr(Schema.String),
  checked_at: Schema.String
})

const ResetScope = Schema.Literal("store", "all")

export class StoreApi extends HttpApiGroup.make("store")
  .add(shared.addService.annotate(OpenApi.Summary, "Register services in the store"))
  .add(
    HttpApiEndpoint.get("listServices", "/for_store/list_services")
      .setUrlParams(Schema.Struct({ scope: Schema.optional(ResetScope) }))
      .addSuccess(ListServicesResponse)
      .annotate(OpenApi.Summary, "List the store's services (scope=all adds every agent's)")
  )
  .add(shared.getServiceInfo.annotate(OpenApi.Summary, "One service in detail, with its tools"))
  .add(shared.listTools.annotate(OpenApi.Summary, "List the store's tools (callable names)"))
  .add(shared.searchTools.annotate(OpenApi.Summary, "Search the store's tools: the best matches for a few words, with their schemas (README, Large catalogs)"))
  .add(shared.callTool.annotate(OpenApi.Summary, "Call a tool of a store service"))
  .add(shared.listResources.annotate(OpenApi.Summary, "List the store's resources (URIs prefixed mcp-store://<service>/ where two services collide)"))
  .add(shared.listResourceTemplates.annotate(OpenApi.Summary, "List the store's resource templates"))
  .add(shared.readResource.annotate(OpenApi.Summary, "Read a resource of a store service"))
  .add(shared.listPrompts.annotate(OpenApi.Summary, "List the store's prompts (callable names <service>__<prompt>)"))
  .add(shared.getPrompt.annotate(OpenApi.Summary, "Get a prompt of a store service, with its arguments"))
  .add(shared.useTool.annotate(OpenApi.Summary, "Call a tool (kept for backward compatibility)"))
  .add(shared.getCall.setPath(CallPath).annotate(OpenApi.Summary, "An asynchronous call of the store (call_tool \"async\": true): status, progress, answer"))
  .add(shared.cancelCall.setPath(CallPath).annotate(OpenApi.Summary, "Cancel an asynchronous call of the store"))
  .add(shared.checkServices.annotate(OpenApi.Summary, "Health-check every store service now"))
  .add(shared.health.annotate(OpenApi.Summary, "The store's health: healthy, degraded or unhealthy"))
  .add(shared.getStats.annotate(OpenApi.Summary, "Statistics of the store: services, tools, tool calls"))
  .add(shared.showMcpConfig.annotate(OpenApi.Summary, "The services file as stored"))
  .add(
    HttpApiEndpoint.post("resetConfig", "/for_store/reset_config")
      .setPayload(optionalBody({ scope: Schema.optional(ResetScope) }))
      .setUrlParams(Schema.Struct({ scope: Schema.optional(ResetScope) }))
      .addSuccess(ResetResponse)
      .annotate(OpenApi.Summary, "Stop and remove the store's services (scope=all: every agent's too)")
  )
  .add(
    HttpApiEndpoint.post("resetMcpJsonFile", "/for_store/reset_mcp_json_file")
      .addSuccess(Schema.Struct({ ...ok, backup_path: Schema.String, removed: Schema.Number }))
      .annotate(OpenApi.Summary, "Back up the services file to .bak, empty it, stop every service")
  )
  .add(shared.waitService.annotate(OpenApi.Summary, "Wait until a store service reaches a status"))
  .add(shared.authorizeService.annotate(OpenApi.Summary, "Start (or finish with a pasted code) the OAuth authorization of an upstream"))
  .add(acceptToolChangesEndpoint("/for_store").annotate(OpenApi.Summary, "Accept the changed definitions of a service's held tools (pinned tools)"))
  .add(credentialsEndpoints("/for_store").put.setPath(CredentialsPath).annotate(OpenApi.Summary, "Give your own credential for a per_user service (write-only)"))
  .add(credentialsEndpoints("/for_store").del.setPath(CredentialsPath).annotate(OpenApi.Summary, "Delete your own credential for a per_user service"))
  .add(credentialsEndpoints("/for_store").authorize.setPath(CredentialsPath).annotate(OpenApi.Summary, "Authorize a per_user OAuth service's upstream for yourself (your own token)"))
  .add(credentialsEndpoints("/for_store").get.setPath(CredentialsPath).annotate(OpenApi.Summary, "What you have given and authorized for a per_user service (names only)"))
  .add(shared.deleteService.setPath(ServicePath).annotate(OpenApi.Summary, "Delete a service (config entry and actor)"))
  .add(
    HttpApiEndpoint.post("deleteServiceTwoStep", "/for_store/delete_service_two_step")
      .setPayload(ServiceNamePayload)
      .addSuccess(TwoStepDeleteResponse)
      .annotate(OpenApi.Summary, "Delete a service: config entry first, then the actor")
  )
  .add(
    shared.toolRecords
      .setUrlParams(Schema.Struct({ ...RecordsQuery.fields, scope: Schema.optional(Schema.Literal("all", "store")) }))
      .annotate(OpenApi.Summary, "Tool-call records, newest first, with a summary")
  )
  .add(
    HttpApiEndpoint.post("networkCheck", "/for_store/network_check")
      .setPayload(NetworkCheckPayload)
      .addSuccess(Schema.Struct({ ...ok, results: Schema.Array(NetworkCheckResult) }))
      .annotate(OpenApi.Summary, "Check that HTTP endpoints answer")
  )
  .add(
    HttpApiEndpoint.get("systemResources", "/for_store/system_resources")
      .addSuccess(
        Schema.Struct({
          ...ok,
          server_uptime_seconds: Schema.Number,
          memory_total: Schema.Number,
          memory_used: Schema.Number,
          memory_percentage: Schema.Number,
          process_rss: Schema.Number,
          heap_used: Schema.Number,
          cpu_percentage: Schema.Number,
          cpu_count: Schema.Number,
          load_average: Schema.Array(Schema.Number),
          disk_total: Schema.Number,
          disk_used: Schema.Number,
          disk_usage_percentage: Schema.Number
        })
      )
      .annotate(OpenApi.Summary, "Memory, CPU, load and disk figures")
  )
  .add(
    HttpApiEndpoint.get("serviceStatus", "/for_store/service_status/:service_name")
      .setPath(ServicePath)
      .addSuccess(
        Schema.Struct({
          ...ok,
          name: Schema.String,
          status: Status,
          consecutive_failures: Schema.Number,
          consecutive_successes: Schema.Number,
          reconnect_attempts: Schema.Number,
          next_retry_at: Schema.NullOr(Schema.String),
          last_error: Schema.NullOr(Schema.String),
          hint: Schema.NullOr(Schema.String),
          last_health_check_at: Schema.NullOr(Schema.String),
          response_time_ms: Schema.NullOr(Schema.Number),
          state_entered_at: Schema.String,
          transitions: Schema.Array(Transition),
          stderr_tail: Schema.Array(Schema.String),
          protocol_version: PROTOCOL_VERSION_FIELD,
          auth: Schema.optional(ServiceAuth)
        })
      )
      .annotate(OpenApi.Summary, "Lifecycle detail of a service: counters, last transitions, stderr tail")
  )
  .add(
    HttpApiEndpoint.post("restartService", "/for_store/restart_service")
      .setPayload(ServiceNamePayload)
      .addSuccess(Schema.Struct({ ...ok, service_name: Schema.String, status: Status }))
      .annotate(OpenApi.Summary, "Close the connection and connect afresh (also from disconnected)")
  )
  .add(
    HttpApiEndpoint.put("updateService", "/for_store/update_service/:service_name")
      .setPath(ServicePath)
      .setPayload(UpdateServiceBody)
      .addSuccess(Schema.Struct({ ...ok, service: Service, changed: Schema.Boolean }))
      .annotate(OpenApi.Summary, "Replace a service's definition and reconnect")
  )
  .add(
    HttpApiEndpoint.post("disconnectService", "/for_store/disconnect_service")
      .setPayload(closed({ service_name: ServiceRef, reason: Schema.optional(Schema.String.pipe(Schema.maxLength(1000))) }))
      .addSuccess(Schema.Struct({ ...ok, service_name: Schema.String, status: Status }))
      .annotate(OpenApi.Summary, "Disconnect gracefully; stays disconnected (disabled) until restarted")
  )
  .add(
    HttpApiEndpoint.get("listAllAgents", "/for_store/list_all_agents")
      .addSuccess(
        Schema.Struct({
          ...ok,
          agents: Schema.Array(
            Schema.Struct({
              agent_id: Schema.String,
              service_count: Schema.Number,
              tool_count: Schema.Number,
              status_summary: Schema.Record({ key: Schema.String, value: Schema.Number }),
              services: Schema.Array(Schema.String)
            })
          ),
          total_agents: Schema.Number
        })
      )
      .annotate(OpenApi.Summary, "Every agent with its services")
  )
  .add(
    HttpApiEndpoint.get("showConfig", "/for_store/show_config")
      .addSuccess(Schema.Struct({ ...ok, config: Schema.Record({ key: Schema.String, value: Schema.Unknown }) }))
      .annotate(OpenApi.Summary, "The store's effective settings")
  )
  .add(
    HttpApiEndpoint.post("refreshTools", "/for_store/refresh_tools")
      .setPayload(optionalBody({ service_name: Schema.optional(ServiceRef) }))
      .addSuccess(
        Schema.Struct({
          ...ok,
          results: Schema.Array(
            Schema.Struct({
              service_name: Schema.String,
              tool_count: Schema.Number,
              changed: Schema.Boolean,
              status: Status,
              error: Schema.NullOr(Schema.String)
            })
          )
        })
      )
      .annotate(OpenApi.Summary, "List the tools again now")
  ) {}
