/** The store group's contract: endpoints, payloads and errors of `/for_store` (shared/API.md). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import {
  ListServicesResponse,
  ServiceNamePayload,
  TwoStepDeleteResponse,
  ok,
  scopeEndpoints
} from "../schemas.js"

const shared = scopeEndpoints("/for_store")

export const NetworkCheckPayload = Schema.Struct({
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

export class StoreApi extends HttpApiGroup.make("store")
  .add(shared.addService.annotate(OpenApi.Summary, "Register services in the store"))
  .add(
    HttpApiEndpoint.get("listServices", "/for_store/list_services")
      .setUrlParams(Schema.Struct({ scope: Schema.optional(Schema.Literal("all", "store")) }))
      .addSuccess(ListServicesResponse)
      .annotate(OpenApi.Summary, "List the store's services (scope=all adds every agent's)")
  )
  .add(shared.callTool.annotate(OpenApi.Summary, "Call a tool of a store service"))
  .add(shared.useTool.annotate(OpenApi.Summary, "Call a tool (kept for backward compatibility)"))
  .add(shared.waitService.annotate(OpenApi.Summary, "Wait until a store service reaches a status"))
  .add(
    HttpApiEndpoint.post("deleteServiceTwoStep", "/for_store/delete_service_two_step")
      .setPayload(ServiceNamePayload)
      .addSuccess(TwoStepDeleteResponse)
      .annotate(OpenApi.Summary, "Delete a service: config entry first, then the actor")
  )
  .add(
    HttpApiEndpoint.post("networkCheck", "/for_store/network_check")
      .setPayload(NetworkCheckPayload)
      .addSuccess(Schema.Struct({ ...ok, results: Schema.Array(NetworkCheckResult) }))
      .annotate(OpenApi.Summary, "Check that HTTP endpoints answer")
  ) {}
