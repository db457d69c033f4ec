/**
 * The wire schemas shared by the store and agent groups (docs/api.md), and the
 * endpoint builders both scopes use, so the two scopes cannot drift apart. Names, ids, statuses
 * and service definitions are the domain's schemas (src/domain/schemas.ts), decoded here, at the
 * edge.
 */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import { Context, Schema } from "effect"
import { AddServiceBody, ServiceRef, STATUSES, Status, ToolName } from "../domain/schemas.js"
import { OUTCOMES } from "../records/tool-records.js"
import { ASYNC_CALL_STATUSES } from "../records/async-results.js"
import { WaitTimeout } from "./contract-errors.js"
import { DEFAULT_SEARCH_LIMIT, MAX_QUERY_LENGTH, MAX_SEARCH_LIMIT } from "../runtime/tool-search.js"

export { Status }

/** An OAuth-protected upstream's authorization state (never a token). */
export const ServiceAuth = Schema.Struct({
  required: Schema.Literal(true),
  state: Schema.Literal("needs_authorization", "authorizing", "authorized", "refresh_failed"),
  authorization_url: Schema.optional(Schema.String),
  scopes: Schema.optional(Schema.Array(Schema.String)),
  expires_at: Schema.optional(Schema.String)
}).annotations({ identifier: "ServiceAuth", description: "present when the upstream requires OAuth: the state of its authorization" })

/** The MCP revision spoken with a service (list_services, get_service_info, service_status). */
export const PROTOCOL_VERSION_FIELD = Schema.NullOr(Schema.String).annotations({
  description: "the MCP protocol revision spoken with the upstream (2026-07-28, or a 2025-era one), negotiated or pinned; null before the first connect"
})

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
  hint: Schema.NullOr(Schema.String).annotations({
    description: "what to do about the last connection failure, when known (e.g. 'command contains spaces: put the arguments in \"args\"')"
  }),
  last_state_change: Schema.String,
  consecutive_failures: Schema.Number,
  reconnect_attempts: Schema.Number,
  next_retry_at: Schema.NullOr(Schema.String),
  response_time_ms: Schema.NullOr(Schema.Number),
  protocol_version: PROTOCOL_VERSION_FIELD,
  auth: Schema.optional(ServiceAuth)
}).annotations({ identifier: "Service" })

export const Tool = Schema.Struct({
  name: Schema.String.annotations({ description: "callable name: <service>__<tool>" }),
  original_name: Schema.String,
  description: Schema.String,
  service_name: Schema.String,
  title: Schema.optional(Schema.String),
  inputSchema: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  outputSchema: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  annotations: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  execution: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  _meta: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
}).annotations({ identifier: "Tool", description: "The upstream's MCP fields (title, inputSchema, outputSchema, annotations, execution, _meta) are passed through unchanged" })

/** A tool the store does not offer to agents (MCP Apps' app-only tools, tools that require MCP tasks). */
export const HiddenTool = Schema.Struct({
  name: Schema.String,
  original_name: Schema.String,
  reason: Schema.String
}).annotations({ identifier: "HiddenTool" })

/** One field's change of a held tool: its text before and after (null: absent), each cut at 2000 characters. */
const FieldChange = Schema.Struct({ before: Schema.NullOr(Schema.String), after: Schema.NullOr(Schema.String) })

/** A tool held because its definition is not the pinned one (docs/tool-pins.md): what changed, old and new text. */
export const HeldTool = Schema.Struct({
  name: Schema.String,
  original_name: Schema.String,
  change: Schema.Literal("changed", "new"),
  changed_fields: Schema.Array(Schema.String),
  diff: Schema.Record({ key: Schema.String, value: FieldChange }),
  seen_at: Schema.String
}).annotations({ identifier: "HeldTool" })

/** `success` and `message`, present in every success body. */
export const ok = { success: Schema.Boolean, message: Schema.String }

/**
 * A body of these fields only: a field the endpoint does not know is refused by name (a typo such
 * as `agrs` would otherwise be dropped without a word, and the call run without its arguments).
 * Service definitions are not closed: their unknown fields are kept (the services file keeps them).
 */
export const closed = <F extends Schema.Struct.Fields>(fields: F) => Schema.Struct(fields).annotations({ parseOptions: { onExcessProperty: "error" } })

export const AddServiceQuery = Schema.Struct({
  wait: Schema.optional(Schema.NumberFromString.pipe(Schema.between(0, 30))).annotations({
    description: "seconds to wait for each service to leave 'initializing' (0-30)"
  })
})

export const AddServiceResponse = Schema.Struct({
  ...ok,
  services: Schema.Array(Service),
  added: Schema.Array(Schema.String),
  updated: Schema.Array(Schema.String),
  unchanged: Schema.Array(Schema.String),
  connected: Schema.optional(Schema.Array(Schema.String)).annotations({ description: "with ?wait: the services connected at the end of the wait" }),
  failed: Schema.optional(
    Schema.Array(
      Schema.Struct({ name: Schema.String, status: Status, error: Schema.String, hint: Schema.NullOr(Schema.String) }).annotations({ identifier: "FailedService" })
    )
  ).annotations({ description: "with ?wait: the services whose connection failed (reconnecting or unreachable), with the error and a hint" }),
  pending: Schema.optional(Schema.Array(Schema.String)).annotations({
    description: "with ?wait: the services neither connected nor failed at the end of the wait (still connecting, or disabled)"
  })
})

export const ListServicesResponse = Schema.Struct({
  ...ok,
  services: Schema.Array(Service),
  total_services: Schema.Number,
  total_tools: Schema.Number
})

const ToolArguments = Schema.Record({ key: Schema.String, value: Schema.Unknown })

export const CallToolPayload = closed({
  tool_name: ToolName,
  // Described on the field, not on the type: the decoder would print a type's description as what it expected.
  args: Schema.optional(ToolArguments).annotations({ description: "The tool's arguments (default {})", examples: [{ a: 2, b: 3 }] }),
  arguments: Schema.optional(ToolArguments).annotations({ description: "An alias of `args` (MCP's name for them); give one of the two" }),
  service_name: Schema.optional(ServiceRef),
  timeout: Schema.optional(Schema.Number.pipe(Schema.greaterThan(0), Schema.lessThanOrEqualTo(3600))).annotations({
    description: "seconds (default 60)"
  }),
  accept_input_required: Schema.optional(Schema.Boolean).annotations({
    description: "true: when the server asks for input during the call (elicitation, sampling), answer `result_type: \"input_required\"` at once with `input_requests` and `request_state` instead of declining the request"
  }),
  request_state: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256))).annotations({
    description: "The `request_state` of an `input_required` answer: this request answers that call's `input_requests`"
  }),
  input_responses: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })).annotations({
    description: "With `request_state`: the result of each input request, by its key"
  }),
  async: Schema.optional(Schema.Boolean).annotations({
    description: "true: answer at once (HTTP 202) with a `call_id`; the call runs on, its status and answer at `GET .../calls/{call_id}`"
  })
}).pipe(
  Schema.filter((p) => p.args === undefined || p.arguments === undefined || { path: ["arguments"], message: "is an alias of \"args\": give one of the two, not both" }),
  Schema.filter((p) => (p.request_state === undefined) === (p.input_responses === undefined) || {
    path: [p.request_state === undefined ? "request_state" : "input_responses"],
    message: "request_state and input_responses come together (the retry of a call that answered input_required)"
  }),
  Schema.filter((p) => p.async !== true || (p.accept_input_required !== true && p.request_state === undefined) || {
    path: ["async"],
    message: "an asynchronous call cannot take input in rounds (accept_input_required, request_state)"
  }),
  Schema.annotations({ identifier: "CallToolPayload" })
)

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
  /** The call's W3C trace id (the caller's `traceparent`'s, or a new trace). */
  trace_id: Schema.String,
  /** The store's span of the call: the parent id the upstream was given. */
  span_id: Schema.String,
  /** The call ended (as opposed to `input_required`). */
  result_type: Schema.Literal("complete")
}).annotations({ identifier: "CallToolResponse" })

/** An asynchronous call's id, as call_tool `"async": true` answered it (a malformed one is 400 naming `call_id`). */
export const CallId = Schema.String.pipe(
  Schema.pattern(/^call_[A-Za-z0-9_-]{32}$/, { message: () => "must be a call_id as call_tool answered it (call_ followed by 32 characters)" })
).annotations({ description: "An asynchronous call's id", examples: ["call_8mJq0rVw2r8m5xU1cQ3b6fH0yD7kA9sL"] })

/** The path of a store call's routes. */
export const CallPath = Schema.Struct({ call_id: CallId })

const AsyncStatus = Schema.Literal(...ASYNC_CALL_STATUSES)

/** The answer of call_tool with `"async": true` (HTTP 202). */
export const AsyncCallAccepted = Schema.Struct({
  ...ok,
  call_id: CallId,
  status: Schema.Literal("running"),
  tool_name: Schema.String,
  status_url: Schema.String.annotations({ description: "Where the call's status and answer are read (GET)" }),
  cancel_url: Schema.String.annotations({ description: "Where the call is cancelled (POST, no body)" })
}).annotations({ identifier: "AsyncCallAccepted" })

/** An asynchronous call: where it is, its latest progress, and once it ended the answer a synchronous call would have given. */
export const AsyncCallResponse = Schema.Struct({
  ...ok,
  call_id: Schema.String,
  status: AsyncStatus,
  tool_name: Schema.String,
  service_name: Schema.NullOr(Schema.String),
  started_at: Schema.String,
  ended_at: Schema.NullOr(Schema.String),
  progress: Schema.NullOr(Schema.Struct({ progress: Schema.Number, total: Schema.NullOr(Schema.Number), message: Schema.NullOr(Schema.String) })),
  answer: Schema.NullOr(
    Schema.Struct({
      http_status: Schema.Number.annotations({ description: "The status a synchronous call_tool would have answered" }),
      body: Schema.Unknown.annotations({ description: "Its body: a CallToolResponse, or an error body" })
    })
  ),
  error: Schema.NullOr(Schema.String),
  trace_id: Schema.NullOr(Schema.String)
}).annotations({ identifier: "AsyncCallResponse" })

/** An upstream's request for input during a call, as MCP shapes it. */
const InputRequest = Schema.Struct({
  method: Schema.String,
  params: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
})

/**
 * The answer of a call whose caller accepted `input_required`, when its server asked for input:
 * the requests by key; the call waits for the retry with `request_state` and `input_responses`.
 */
export const InputRequiredResponse = Schema.Struct({
  ...ok,
  result_type: Schema.Literal("input_required"),
  tool_name: Schema.String,
  input_requests: Schema.Record({ key: Schema.String, value: InputRequest }),
  request_state: Schema.String
}).annotations({ identifier: "InputRequiredResponse" })

/** wait_service's `status`: a status, or a non-empty array of them. */
export const WaitStatus = Schema.Union(Status, Schema.NonEmptyArray(Status)).annotations({
  description: "A status, or a non-empty array of statuses: the wait ends when the service has any of them",
  message: () => ({ message: `must be one of ${STATUSES.join(", ")} (or an array of them)`, override: true })
})

export const WaitPayload = closed({
  client_id_or_service_name: ServiceRef,
  status: Schema.optionalWith(WaitStatus, { default: () => "healthy" as const }),
  timeout: Schema.optionalWith(Schema.Number.pipe(Schema.between(0, 600)), { default: () => 10 }),
  raise_on_timeout: Schema.optionalWith(Schema.Boolean, { default: () => false })
})

export const WaitData = Schema.Struct({
  client_id_or_service_name: Schema.String,
  target_status: Schema.Union(Status, Schema.Array(Status)),
  timeout: Schema.Number,
  result: Schema.Boolean,
  final_status: Schema.String,
  elapsed_ms: Schema.Number,
  context: Schema.Literal("store", "agent"),
  agent_id: Schema.optional(Schema.String)
})

export const WaitResponse = Schema.Struct({ ...ok, data: WaitData })

export const ServiceNamePayload = closed({ service_name: ServiceRef })

export const TwoStepDeleteResponse = Schema.Struct({
  ...ok,
  service_name: Schema.String,
  step1_config_removal: Schema.Boolean,
  step2_registry_cleanup: Schema.Boolean,
  step1_error: Schema.NullOr(Schema.String),
  step2_error: Schema.NullOr(Schema.String),
  overall_success: Schema.Boolean
})

export const ServiceDetail = Schema.Struct({
  ...Service.fields,
  config: Schema.Record({ key: Schema.String, value: Schema.Unknown })
})

export const ServiceInfoResponse = Schema.Struct({
  ...ok,
  service: ServiceDetail,
  tools: Schema.Array(Tool),
  hidden_tools: Schema.Array(HiddenTool).annotations({ description: "The service's tools not offered to agents, and why" }),
  held_tools: Schema.Array(HeldTool).annotations({ description: "The service's tools held by their pins until an operator accepts them (accept_tool_changes), with what changed" }),
  catalog: Schema.optional(Schema.Struct({ resources: Schema.Number, resource_templates: Schema.Number, prompts: Schema.Number })).annotations({
    description: "How many resources, resource templates and prompts the service offers (list_resources, list_resource_templates, list_prompts)"
  }),
  connected: Schema.Boolean
})

export const ListToolsResponse = Schema.Struct({
  ...ok,
  tools: Schema.Array(Tool),
  total_tools: Schema.Number,
  services_count: Schema.Number,
  tools_by_service: Schema.Record({ key: Schema.String, value: Schema.Number })
})

export const CheckServicesResponse = Schema.Struct({
  ...ok,
  services: Schema.Array(
    Schema.Struct({
      name: Schema.String,
      status: Status,
      healthy: Schema.Boolean,
      response_time_ms: Schema.NullOr(Schema.Number),
      error: Schema.NullOr(Schema.String),
      checked_at: Schema.String
    })
  ),
  healthy_count: Schema.Number,
  total: Schema.Number
})

const StatusCounts = Schema.Record({ key: Schema.String, value: Schema.Number })

export const ScopeHealthResponse = Schema.Struct({
  ...ok,
  status: Schema.Literal("healthy", "degraded", "unhealthy"),
  services: StatusCounts,
  total_services: Schema.Number,
  uptime_seconds: Schema.Number,
  version: Schema.String,
  agent_id: Schema.optional(Schema.String)
})

export const StatsResponse = Schema.Struct({
  ...ok,
  total_services: Schema.Number,
  total_tools: Schema.Number,
  healthy_services: Schema.Number,
  services_by_status: StatusCounts,
  tools_by_service: Schema.Record({ key: Schema.String, value: Schema.Number }),
  total_agents: Schema.optional(Schema.Number),
  tool_calls: Schema.Struct({ total: Schema.Number, succeeded: Schema.Number, failed: Schema.Number, avg_duration_ms: Schema.Number }),
  context_type: Schema.Literal("store", "agent"),
  agent_id: Schema.optional(Schema.String)
})

export const McpConfigResponse = Schema.Struct({ ...ok, config: Schema.Unknown, path: Schema.String })

/** show_mcpconfig's query: secrets are masked unless an admin asks `reveal=true`. */
export const ShowMcpConfigQuery = Schema.Struct({
  reveal: Schema.optional(
    Schema.BooleanFromString.annotations({
      description: "true shows env, header, URL and args secrets in clear (admins only; others get them masked)"
    })
  )
})

export const Outcome = Schema.Literal(...OUTCOMES)

const IntFromString = (min: number, max: number) => Schema.NumberFromString.pipe(Schema.int(), Schema.between(min, max))

export const RecordsQuery = Schema.Struct({
  limit: Schema.optional(IntFromString(1, 1000)),
  offset: Schema.optional(IntFromString(0, 1_000_000_000)),
  service_name: Schema.optional(ServiceRef),
  tool_name: Schema.optional(ToolName),
  outcome: Schema.optional(Outcome),
  since: Schema.optional(
    Schema.String.pipe(Schema.filter((s) => !Number.isNaN(Date.parse(s)), { message: () => "must be an ISO-8601 time" }))
  )
})

const Tally = Schema.Struct({ count: Schema.Number, errors: Schema.Number, avg_duration_ms: Schema.Number })

export const ToolRecord = Schema.Struct({
  id: Schema.String,
  timestamp: Schema.String,
  scope: Schema.Literal("store", "agent"),
  agent_id: Schema.NullOr(Schema.String),
  service_name: Schema.String,
  tool_name: Schema.String,
  params: Schema.Unknown,
  result: Schema.Unknown,
  result_truncated: Schema.optional(Schema.Boolean),
  params_truncated: Schema.optional(Schema.Boolean),
  outcome: Outcome,
  error: Schema.NullOr(Schema.String),
  duration_ms: Schema.Number,
  trace_id: Schema.String,
  span_id: Schema.optional(Schema.String),
  approval: Schema.optional(
    Schema.Struct({ approval_id: Schema.String, decided_by: Schema.NullOr(Schema.String) }).annotations({
      description: "A call that needed an approval (README, Approvals): its id, and the label of the key that approved or denied it (null: nobody decided)"
    })
  )
}).annotations({ identifier: "ToolRecord" })

export const RecordsResponse = Schema.Struct({
  ...ok,
  executions: Schema.Array(ToolRecord),
  total: Schema.Number,
  summary: Schema.Struct({
    total_executions: Schema.Number,
    by_tool: Schema.Record({ key: Schema.String, value: Tally }),
    by_service: Schema.Record({ key: Schema.String, value: Tally })
  })
})

export const ServicePath = Schema.Struct({ service_name: ServiceRef })

export const DeleteResponse = Schema.Struct({ ...ok, service_name: Schema.String })

export const ResetResponse = Schema.Struct({ ...ok, scope: Schema.String, removed: Schema.Number })

const Fields = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/** A resource as a scope offers it (src/runtime/catalog.ts): the upstream's MCP fields, its service and original URI. */
export const ResourceItem = Schema.Struct({
  uri: Schema.String.annotations({ description: "the URI to read it by: the upstream's, or mcp-store://<service>/<uri> when two services of the scope expose it" }),
  name: Schema.String,
  service_name: Schema.String,
  original_uri: Schema.String,
  title: Schema.optional(Schema.String),
  description: Schema.optional(Schema.String),
  mimeType: Schema.optional(Schema.String),
  size: Schema.optional(Schema.Number),
  annotations: Schema.optional(Fields),
  _meta: Schema.optional(Fields)
}).annotations({ identifier: "Resource" })

export const ResourceTemplateItem = Schema.Struct({
  uriTemplate: Schema.String,
  name: Schema.String,
  service_name: Schema.String,
  original_uri_template: Schema.String,
  title: Schema.optional(Schema.String),
  description: Schema.optional(Schema.String),
  mimeType: Schema.optional(Schema.String),
  annotations: Schema.optional(Fields),
  _meta: Schema.optional(Fields)
}).annotations({ identifier: "ResourceTemplate" })

export const PromptItem = Schema.Struct({
  name: Schema.String.annotations({ description: "callable name: <service>__<prompt>" }),
  original_name: Schema.String,
  service_name: Schema.String,
  title: Schema.optional(Schema.String),
  description: Schema.optional(Schema.String),
  arguments: Schema.optional(
    Schema.Array(Schema.Struct({ name: Schema.String, title: Schema.optional(Schema.String), description: Schema.optional(Schema.String), required: Schema.optional(Schema.Boolean) }))
  ),
  _meta: Schema.optional(Fields)
}).annotations({ identifier: "Prompt" })

export const ServiceFilter = Schema.Struct({ service_name: Schema.optional(ServiceRef) })

export const ReadResourcePayload = closed({
  uri: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(8192)).annotations({ description: "as listed, prefixed (mcp-store://<service>/<uri>), or matching a resource template" })
})

export const GetPromptPayload = closed({
  name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(1000)).annotations({ description: "callable name: <service>__<prompt>" }),
  arguments: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String.pipe(Schema.maxLength(100_000)) }))
})

/** An optional JSON body (absent, empty or null all mean "no fields"). */
export const optionalBody = <F extends Schema.Struct.Fields>(fields: F) => Schema.NullOr(closed(fields))

/** authorize_service: start an upstream's OAuth authorization, or finish it with a pasted code. */
export const AuthorizePayload = closed({
  service_name: ServiceRef,
  redirect_uri: Schema.optional(Schema.String.pipe(Schema.maxLength(2048))).annotations({
    description: "where the authorization server sends the browser back: the store's own /oauth/callback (the default) or a loopback http(s) URL (127.0.0.1, [::1], localhost)"
  }),
  code: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(4096))).annotations({ description: "paste-the-code: the code the authorization server gave" }),
  state: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256))).annotations({ description: "paste-the-code: the state that came with it" }),
  iss: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(2048))).annotations({
    description:
      "paste-the-code: the iss that came with the code (RFC 9207), when the authorization server sends one; required then: it is checked against the service's authorization server (mix-up attacks)"
  })
})

export const AuthorizeResponse = Schema.Struct({
  ...ok,
  service_name: Schema.String,
  state: Schema.Literal("authorizing", "authorized"),
  authorization_url: Schema.optional(Schema.String).annotations({ description: "the URL to open in a browser (state authorizing)" })
})

/**
 * Marks an endpoint the store serves beyond the contract's 56 (resources, prompts, OAuth): served,
 * checked and documented like the others, but counted apart by `GET /` (docs/api.md).
 */
export class BeyondContract extends Context.Tag("mcp-store/BeyondContract")<BeyondContract, true>() {}

/** `search_tools`' query (README, Large catalogs): what the tool should do, and how many tools to answer. */
export const SearchToolsQuery = Schema.Struct({
  q: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(MAX_QUERY_LENGTH), Schema.filter((s) => s.trim() !== "", { message: () => "must not be blank" })).annotations({
    description: "what the tool should do, in a few words"
  }),
  limit: Schema.optional(IntFromString(1, MAX_SEARCH_LIMIT)).annotations({ description: `how many tools to answer (default ${DEFAULT_SEARCH_LIMIT})` })
})

export const SearchToolsResponse = Schema.Struct({
  ...ok,
  query: Schema.String,
  tools: Schema.Array(Schema.Struct({ ...Tool.fields, score: Schema.Number.annotations({ description: "BM25+ relevance; higher is better" }) })).annotations({
    description: "the tools the caller may call that match, best first (ties by name)"
  })
})

/** The endpoints both scopes have, under a path prefix (`/for_store` or `/for_agent/:agent_id`). */
export const scopeEndpoints = (prefix: string) => {
  const at = (path: string) => `${prefix}/${path}` as `/${string}`
  return {
    addService: HttpApiEndpoint.post("addService", at("add_service"))
      .setPayload(AddServiceBody)
      .setUrlParams(AddServiceQuery)
      .addSuccess(AddServiceResponse),
    callTool: HttpApiEndpoint.post("callTool", at("call_tool"))
      .setPayload(CallToolPayload)
      .addSuccess(Schema.Union(CallToolResponse, InputRequiredResponse))
      .addSuccess(AsyncCallAccepted, { status: 202 }),
    useTool: HttpApiEndpoint.post("useTool", at("use_tool"))
      .setPayload(CallToolPayload)
      .addSuccess(Schema.Union(CallToolResponse, InputRequiredResponse))
      .addSuccess(AsyncCallAccepted, { status: 202 }),
    getCall: HttpApiEndpoint.get("getCall", at("calls/:call_id")).addSuccess(AsyncCallResponse).annotate(BeyondContract, true),
    cancelCall: HttpApiEndpoint.post("cancelCall", at("calls/:call_id/cancel")).addSuccess(AsyncCallResponse).annotate(BeyondContract, true),
    waitService: HttpApiEndpoint.post("waitService", at("wait_service"))
      .setPayload(WaitPayload)
      .addSuccess(WaitResponse)
      .addError(WaitTimeout),
    getServiceInfo: HttpApiEndpoint.get("getServiceInfo", at("get_service_info"))
      .setUrlParams(Schema.Struct({ name: ServiceRef }))
      .addSuccess(ServiceInfoResponse),
    listTools: HttpApiEndpoint.get("listTools", at("list_tools"))
      .setUrlParams(Schema.Struct({ service_name: Schema.optional(ServiceRef) }))
      .addSuccess(ListToolsResponse),
    searchTools: HttpApiEndpoint.get("searchTools", at("search_tools")).setUrlParams(SearchToolsQuery).addSuccess(SearchToolsResponse).annotate(BeyondContract, true),
    checkServices: HttpApiEndpoint.get("checkServices", at("check_services")).addSuccess(CheckServicesResponse),
    deleteService: HttpApiEndpoint.del("deleteService", at("delete_service/:service_name")).addSuccess(DeleteResponse),
    showMcpConfig: HttpApiEndpoint.get("showMcpConfig", at("show_mcpconfig"))
      .setUrlParams(ShowMcpConfigQuery)
      .addSuccess(McpConfigResponse),
    health: HttpApiEndpoint.get("health", at("health")).addSuccess(ScopeHealthResponse),
    getStats: HttpApiEndpoint.get("getStats", at("get_stats")).addSuccess(StatsResponse),
    toolRecords: HttpApiEndpoint.get("toolRecords", at("tool_records")).addSuccess(RecordsResponse),
    listResources: HttpApiEndpoint.get("listResources", at("list_resources"))
      .setUrlParams(ServiceFilter)
      .addSuccess(Schema.Struct({ ...ok, resources: Schema.Array(ResourceItem) }))
      .annotate(BeyondContract, true),
    listResourceTemplates: HttpApiEndpoint.get("listResourceTemplates", at("list_resource_templates"))
      .setUrlParams(ServiceFilter)
      .addSuccess(Schema.Struct({ ...ok, resource_templates: Schema.Array(ResourceTemplateItem) }))
      .annotate(BeyondContract, true),
    readResource: HttpApiEndpoint.post("readResource", at("read_resource"))
      .setPayload(ReadResourcePayload)
      .addSuccess(Schema.Struct({ ...ok, uri: Schema.String, service_name: Schema.String, contents: Schema.Array(Fields) }))
      .annotate(BeyondContract, true),
    listPrompts: HttpApiEndpoint.get("listPrompts", at("list_prompts"))
      .setUrlParams(ServiceFilter)
      .addSuccess(Schema.Struct({ ...ok, prompts: Schema.Array(PromptItem) }))
      .annotate(BeyondContract, true),
    getPrompt: HttpApiEndpoint.post("getPrompt", at("get_prompt"))
      .setPayload(GetPromptPayload)
      .addSuccess(Schema.Struct({ ...ok, name: Schema.String, service_name: Schema.String, description: Schema.optional(Schema.String), messages: Schema.Array(Fields) }))
      .annotate(BeyondContract, true),
    authorizeService: HttpApiEndpoint.post("authorizeService", at("authorize_service"))
      .setPayload(AuthorizePayload)
      .addSuccess(AuthorizeResponse)
      .annotate(BeyondContract, true)
  }
}
