/**
 * The wire schemas shared by the store and agent groups (shared/API.md, Resources), and the
 * endpoint builders both scopes use, so the two scopes cannot drift apart.
 */
import { HttpApiEndpoint } from "@effect/platform"
import { Schema } from "effect"
import { STATUSES } from "../domain/service.js"
import { WaitTimeout } from "./errors.js"

export const Status = Schema.Literal(...STATUSES)

export const Service = Schema.Struct({
  name: Schema.String,
  url: Schema.String,
  status: Status,
  tool_count: Schema.Number,
  transport_type: Schema.Literal("streamable_http", "sse", "stdio"),
  command: Schema.NullOr(Schema.String),
  args: Schema.NullOr(Schema.Array(Schema.String)),
  scope: Schema.String,
  client_id: Schema.String,
  last_error: Schema.NullOr(Schema.String),
  last_state_change: Schema.String,
  consecutive_failures: Schema.Number,
  reconnect_attempts: Schema.Number,
  next_retry_at: Schema.NullOr(Schema.String),
  response_time_ms: Schema.NullOr(Schema.Number)
}).annotations({ identifier: "Service" })

export const Tool = Schema.Struct({
  name: Schema.String.annotations({ description: "callable name: <service>__<tool>" }),
  original_name: Schema.String,
  description: Schema.String,
  service_name: Schema.String,
  inputSchema: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  annotations: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
}).annotations({ identifier: "Tool" })

/** `success` and `message`, present in every success body. */
export const ok = { success: Schema.Boolean, message: Schema.String }

/** A non-empty string of bounded length (names, ids). */
export const Name = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256))

const definitionJsonSchema = {
  oneOf: [
    { $ref: "#/components/schemas/ServiceDefinition" },
    {
      type: "object",
      required: ["mcpServers"],
      properties: { mcpServers: { type: "object", additionalProperties: { type: "object" } } }
    },
    { type: "array", items: { $ref: "#/components/schemas/ServiceDefinition" } }
  ]
}

/**
 * add_service body: a definition, `{mcpServers: {...}}` or an array. Decoded by the store, which
 * names each bad field (a schema union would only say that no member matched).
 */
export const AddServicePayload = Schema.Unknown.annotations({
  identifier: "AddServiceBody",
  description:
    "A service definition ({name, url[, transport, headers]} or {name, command[, args, env, cwd]}), or {mcpServers: {name: definition}}, or an array of definitions",
  jsonSchema: definitionJsonSchema
})

export const AddServiceQuery = Schema.Struct({
  wait: Schema.optional(
    Schema.NumberFromString.pipe(Schema.between(0, 30)).annotations({
      description: "seconds to wait for each service to leave 'initializing' (0-30)"
    })
  )
})

export const AddServiceResponse = Schema.Struct({
  ...ok,
  services: Schema.Array(Service),
  added: Schema.Array(Schema.String),
  updated: Schema.Array(Schema.String),
  unchanged: Schema.Array(Schema.String)
})

export const ListServicesResponse = Schema.Struct({
  ...ok,
  services: Schema.Array(Service),
  total_services: Schema.Number,
  total_tools: Schema.Number
})

export const CallToolPayload = Schema.Struct({
  tool_name: Name,
  args: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  service_name: Schema.optional(Name),
  timeout: Schema.optional(Schema.Number.pipe(Schema.greaterThan(0), Schema.lessThanOrEqualTo(3600))).annotations({
    description: "seconds (default 60)"
  })
})

export const CallToolResponse = Schema.Struct({
  ...ok,
  result: Schema.Unknown,
  content: Schema.Array(Schema.Unknown),
  structured_content: Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  is_error: Schema.Boolean,
  tool_name: Schema.String,
  original_name: Schema.String,
  service_name: Schema.String,
  duration_ms: Schema.Number,
  trace_id: Schema.String
})

export const WaitPayload = Schema.Struct({
  client_id_or_service_name: Name,
  status: Schema.optionalWith(Schema.Union(Schema.String, Schema.Array(Schema.String)), { default: () => "healthy" }),
  timeout: Schema.optionalWith(Schema.Number.pipe(Schema.between(0, 600)), { default: () => 10 }),
  raise_on_timeout: Schema.optionalWith(Schema.Boolean, { default: () => false })
})

export const WaitData = Schema.Struct({
  client_id_or_service_name: Schema.String,
  target_status: Schema.Union(Schema.String, Schema.Array(Schema.String)),
  timeout: Schema.Number,
  result: Schema.Boolean,
  final_status: Schema.String,
  elapsed_ms: Schema.Number,
  context: Schema.Literal("store", "agent"),
  agent_id: Schema.optional(Schema.String)
})

export const WaitResponse = Schema.Struct({ ...ok, data: WaitData })

export const ServiceNamePayload = Schema.Struct({ service_name: Name })

export const TwoStepDeleteResponse = Schema.Struct({
  ...ok,
  service_name: Schema.String,
  step1_config_removal: Schema.Boolean,
  step2_registry_cleanup: Schema.Boolean,
  step1_error: Schema.NullOr(Schema.String),
  step2_error: Schema.NullOr(Schema.String),
  overall_success: Schema.Boolean
})

/** The endpoints both scopes have, under a path prefix (`/for_store` or `/for_agent/:agent_id`). */
export const scopeEndpoints = (prefix: string) => {
  const at = (path: string) => `${prefix}/${path}` as `/${string}`
  return {
  addService: HttpApiEndpoint.post("addService", at("add_service"))
    .setPayload(AddServicePayload)
    .setUrlParams(AddServiceQuery)
    .addSuccess(AddServiceResponse),
  callTool: HttpApiEndpoint.post("callTool", at("call_tool")).setPayload(CallToolPayload).addSuccess(CallToolResponse),
  useTool: HttpApiEndpoint.post("useTool", at("use_tool")).setPayload(CallToolPayload).addSuccess(CallToolResponse),
  waitService: HttpApiEndpoint.post("waitService", at("wait_service"))
    .setPayload(WaitPayload)
    .addSuccess(WaitResponse)
    .addError(WaitTimeout)
}
}
