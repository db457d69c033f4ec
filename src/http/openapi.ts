/**
 * The OpenAPI document as tools take it (validators, type generators): what HttpApi generates
 * from the contract, finished here (src/http/Api.ts applies it as the API's OpenApi.Transform):
 * - an example of every request body, 200 answer and error answer: examples.json, what a real
 *   store answered, captured by scripts/capture-examples.ts (`npm run examples`);
 * - no `$id` on the schemas of unknown values: Effect writes `"$id": "/schemas/unknown"` on every
 *   `Schema.Unknown`, and one `$id` given to many schemas is an error to JSON Schema tools;
 * - the routes beside the contract (/openapi.json, /docs, /events, /metrics, /inspect/*, /ui, the
 *   MCP endpoints) documented in the description, with which of them need no key.
 * test/http/openapi.test.ts validates the result with @apidevtools/swagger-parser and generates
 * types from it with openapi-typescript.
 */
import captured from "./examples.json" with { type: "json" }

type Json = Record<string, any>

/** An operation's example: its request body (when it takes one) and its 200 answer. */
export interface Example {
  readonly request?: unknown
  readonly response: unknown
}

/** Each operation's example, by operationId (`group.endpoint`). */
export const EXAMPLES: Readonly<Record<string, Example>> = captured.operations

/** An example of each error answer of the contract, by HTTP status. */
export const ERROR_EXAMPLES: Readonly<Record<string, unknown>> = captured.errors

const OPERATION_METHODS = new Set(["get", "post", "put", "delete", "patch"])

/** Each operation's request body and 200 answer get their example (by operationId), each error answer its status's. */
const withExamples = (spec: Json): Json => {
  for (const item of Object.values(spec.paths ?? {}) as Array<Json>) {
    for (const [method, operation] of Object.entries(item)) {
      if (!OPERATION_METHODS.has(method)) continue
      const example = EXAMPLES[operation.operationId as string]
      if (example === undefined) continue
      const body = operation.requestBody?.content?.["application/json"]
      if (body !== undefined && example.request !== undefined) body.example = example.request
      const ok = operation.responses?.["200"]?.content?.["application/json"]
      if (ok !== undefined) ok.example = example.response
    }
  }
  // The error examples once, in components, referred to by every answer of their status.
  spec.components ??= {}
  spec.components.examples = { ...spec.components.examples }
  for (const [status, value] of Object.entries(ERROR_EXAMPLES)) spec.components.examples[`Error${status}`] = { summary: `A ${status} answer`, value }
  for (const item of Object.values(spec.paths ?? {}) as Array<Json>) {
    for (const [method, operation] of Object.entries(item)) {
      if (!OPERATION_METHODS.has(method)) continue
      for (const [status, response] of Object.entries(operation.responses ?? {}) as Array<[string, Json]>) {
        const content = response.content?.["application/json"]
        if (Number(status) >= 400 && content !== undefined && ERROR_EXAMPLES[status] !== undefined) {
          content.examples = { [`Error${status}`]: { $ref: `#/components/examples/Error${status}` } }
        }
      }
    }
  }
  return spec
}

/** Removes the `$id`s Effect gives its built-in schemas (`/schemas/unknown`, ...), in place. */
const withoutBuiltinIds = (value: unknown): void => {
  const pending: Array<unknown> = [value]
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    if (typeof next !== "object" || next === null) continue
    if (!Array.isArray(next) && typeof (next as Json).$id === "string" && (next as Json).$id.startsWith("/schemas/")) delete (next as Json).$id
    for (const child of Object.values(next)) pending.push(child)
  }
}

/** An extra route: how it is documented. */
export interface ExtraRoute {
  readonly method: "GET" | "POST" | "DELETE"
  /** The path as the router has it (`:agent_id`). */
  readonly path: string
  readonly summary: string
  /** The media type of its 200 answer. */
  readonly type: string
  /** Served without the API key. */
  readonly open?: boolean
}

const mcp = (path: string, scope: string): ReadonlyArray<ExtraRoute> => [
  { method: "POST", path, summary: `MCP (streamable HTTP) for ${scope}: JSON-RPC requests of an MCP client (initialize, tools/list, tools/call)`, type: "application/json" },
  { method: "GET", path, summary: `MCP (streamable HTTP) for ${scope}: the session's event stream (notifications/tools/list_changed)`, type: "text/event-stream" },
  { method: "DELETE", path, summary: `MCP (streamable HTTP) for ${scope}: ends the session`, type: "application/json" }
]

/** The legacy SSE transport (MCP 2024-11-05) of a scope, under `prefix`. */
const sse = (prefix: string, scope: string): ReadonlyArray<ExtraRoute> => [
  { method: "GET", path: `${prefix}/sse`, summary: `MCP (legacy SSE, for old clients) for ${scope}: opens a session; its first event, \`endpoint\`, is the URL to POST messages to`, type: "text/event-stream" },
  { method: "POST", path: `${prefix}/messages`, summary: `MCP (legacy SSE) for ${scope}: one JSON-RPC message of the session named by ?sessionId= (202; the answer comes on the session's stream)`, type: "text/plain" }
]

/** The routes beside the contract (src/http/extras.ts, EXTRA_ROUTES; test/http/openapi.test.ts checks both lists agree). */
export const EXTRA_DOCS: ReadonlyArray<ExtraRoute> = [
  { method: "GET", path: "/openapi.json", summary: "This document (OpenAPI 3.1)", type: "application/json", open: true },
  { method: "GET", path: "/docs", summary: "Interactive documentation of this document (Swagger UI); its calls carry the key given to Authorize", type: "text/html", open: true },
  { method: "GET", path: "/events", summary: "Server-Sent Events: status changes, tool list changes, alerts, tool calls (query agent_id: one scope, \"store\" for the store's)", type: "text/event-stream" },
  { method: "GET", path: "/metrics", summary: "Prometheus metrics (text format)", type: "text/plain" },
  { method: "GET", path: "/inspect/machines", summary: "The state machines' definitions, for visualisers", type: "application/json" },
  { method: "GET", path: "/inspect/actors", summary: "Every live actor's snapshot", type: "application/json" },
  { method: "GET", path: "/inspect/events", summary: "Server-Sent Events: the actors' inspection events", type: "text/event-stream" },
  { method: "GET", path: "/ui", summary: "The dashboard page (it asks for the key itself)", type: "text/html", open: true },
  { method: "GET", path: "/oauth/callback", summary: "Where an upstream's OAuth authorization server sends the browser back (code and state, single use); a principal's own authorization (per_user oauth) is asked first", type: "text/html", open: true },
  { method: "POST", path: "/oauth/callback", summary: "The answer to the question a principal's own authorization asks at the callback (form: code, state, iss, decision connect or cancel)", type: "text/html", open: true },
  { method: "GET", path: "/.well-known/oauth-protected-resource", summary: "OAuth protected resource metadata of the store (RFC 9728): its authorization servers and scopes (404 without --auth-issuer)", type: "application/json", open: true },
  { method: "GET", path: "/.well-known/oauth-protected-resource/mcp", summary: "OAuth protected resource metadata of /mcp", type: "application/json", open: true },
  { method: "GET", path: "/.well-known/oauth-protected-resource/for_agent/:agent_id/mcp", summary: "OAuth protected resource metadata of an agent's /mcp", type: "application/json", open: true },
  ...mcp("/mcp", "the store's healthy tools"),
  ...mcp("/for_agent/:agent_id/mcp", "an agent's healthy tools"),
  ...sse("", "the store's healthy tools"),
  ...sse("/for_agent/:agent_id", "an agent's healthy tools"),
  // The built-in authorization server (--auth-server; 404 without it).
  { method: "GET", path: "/.well-known/oauth-authorization-server", summary: "The built-in authorization server's metadata (RFC 8414)", type: "application/json", open: true },
  { method: "GET", path: "/oauth/jwks", summary: "The built-in authorization server's public signing key (JWKS)", type: "application/json", open: true },
  { method: "GET", path: "/oauth/authorize", summary: "Authorization endpoint (code with PKCE S256, resource, iss): a code for an approved client, else the consent page", type: "text/html", open: true },
  { method: "POST", path: "/oauth/consent", summary: "The consent page's decision: {request_id, decision: approve|deny, tools} (admin key)", type: "application/json" },
  { method: "POST", path: "/oauth/token", summary: "Token endpoint (authorization_code, refresh_token, client_credentials; form-encoded)", type: "application/json", open: true },
  { method: "POST", path: "/oauth/revoke", summary: "Revocation endpoint (RFC 7009; form-encoded)", type: "application/json", open: true },
  { method: "POST", path: "/oauth/register", summary: "Dynamic Client Registration (RFC 7591), public clients; off with --no-auth-dynamic-registration", type: "application/json", open: true },
  { method: "POST", path: "/oauth/approve_client", summary: "Approve a client ahead of time: {client_id, agent_id, tools, machine} (admin key)", type: "application/json" },
  { method: "GET", path: "/oauth/clients", summary: "The approved clients: agent, tools, kind, when and by whom (admin key; never a secret)", type: "application/json" },
  { method: "POST", path: "/oauth/revoke_client", summary: "Withdraw a client's approval and revoke its refresh tokens' families: {client_id} (admin key)", type: "application/json" }
]

/**
 * The extra routes in the document's description (a table Swagger UI shows above the operations).
 * Not as operations: `paths` is the route table exactly (the contract's 56 endpoints and the groups'
 * extras, docs/api.md), which the root counts, the 405 answers and the tests derive from.
 */
const withExtras = (spec: Json): Json => {
  const rows = EXTRA_DOCS.map((r) => `| ${r.method} \`${r.path.replace(/:([A-Za-z_]+)/g, "{$1}")}\` | ${r.type} | ${r.open === true ? "no" : "yes"} | ${r.summary} |`)
  spec.info = {
    ...spec.info,
    description: [
      spec.info?.description ?? "",
      "",
      "With `--api-key`, every request needs `Authorization: Bearer <key>` (the Authorize button), except `GET /health`, `GET /ui`, `GET /docs`, `GET /openapi.json`, the OAuth protected resource metadata and the built-in authorization server's open endpoints (marked below). With `--auth-issuer` or `--auth-server`, an OAuth access token of that authorization server for this store is accepted as well.",
      "",
      "The operations below are the contract's 56 endpoints (counted by `GET /` under `endpoints`) and the routes added in the same groups (resources, prompts, `authorize_service`). These and the routes beside the operations are listed by `GET /` under `extra_routes`.",
      "",
      "Routes beside the operations:",
      "",
      "| route | answers | key | what |",
      "|---|---|---|---|",
      ...rows
    ].join("\n")
  }
  return spec
}

/** The document finished for tools (see the top of this file). */
export const finishDocument = (spec: Json): Json => {
  withoutBuiltinIds(spec)
  return withExtras(withExamples(spec))
}
