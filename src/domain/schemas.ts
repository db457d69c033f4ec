/**
 * The domain's schemas: the one place where the rules for names, ids, statuses and service
 * definitions are written (docs/api.md, Conventions). The HTTP contract decodes
 * requests with them, the services file checks its names with them, the runtime checks and
 * resolves definitions with them, and the OpenAPI document is generated from their annotations.
 * Each rule's failure message is a problem text as the contract's `details.fields` shows it
 * (`fieldProblems`). No I/O.
 */
import { Array as Arr, Either, ParseResult, Schema, SchemaAST } from "effect"
import { globsProblem, MAX_GLOB_LENGTH, MAX_GLOBS } from "./tool-filter.js"
import { PROTOCOL_VERSIONS } from "./protocol-versions.js"

// ---------------------------------------------------------------------------------------------
// Statuses
// ---------------------------------------------------------------------------------------------

/** Every status a service can have (docs/lifecycle.md, Statuses). */
export const STATUSES = [
  "initializing",
  "healthy",
  "warning",
  "reconnecting",
  "unreachable",
  "disconnecting",
  "disconnected"
] as const

/** A service's status. */
export const Status = Schema.Literal(...STATUSES).annotations({
  identifier: "Status",
  description: "A service's lifecycle status (docs/lifecycle.md)",
  message: () => ({ message: `must be one of ${STATUSES.join(", ")}`, override: true })
})
export type Status = typeof Status.Type

/** One change of a service's status, as clients see it (`at` is an ISO-8601 time). */
export const Transition = Schema.Struct({
  from: Schema.NullOr(Status),
  to: Status,
  at: Schema.String,
  reason: Schema.String
}).annotations({ identifier: "Transition", description: "A change of a service's status: from, to, when (ISO-8601) and why" })
export type Transition = typeof Transition.Type

// ---------------------------------------------------------------------------------------------
// Names and ids
// ---------------------------------------------------------------------------------------------

const text = (message: string) => Schema.String.annotations({ message: () => message })

export const SERVICE_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/
export const AGENT_ID_PATTERN = /^[A-Za-z0-9_-]{1,100}$/

/**
 * A service name: `^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`, without `__` (it separates service and tool
 * in a callable name) and without `_byagent_` (it marks agent services in the services file).
 */
export const ServiceName = text("must be a string")
  .pipe(
    Schema.pattern(SERVICE_NAME_PATTERN, { message: () => `must match ${SERVICE_NAME_PATTERN.source}` }),
    Schema.filter((s) => !s.includes("__"), { message: () => "must not contain '__'" }),
    Schema.filter((s) => !s.includes("_byagent_"), { message: () => "must not contain '_byagent_'" }),
    Schema.brand("ServiceName")
  )
  .annotations({
    identifier: "ServiceName",
    description: `A service name: ${SERVICE_NAME_PATTERN.source}, without '__' or '_byagent_'`,
    examples: ["weather", "github.tools"] as never,
    jsonSchema: {}
  })
export type ServiceName = typeof ServiceName.Type

/** The agent-id pattern alone: an agent id, or "store" where a filter names the store's scope. */
export const ScopeLabel = text("must be a string").pipe(
  Schema.pattern(AGENT_ID_PATTERN, {
    message: () => `must match ${AGENT_ID_PATTERN.source}`,
    description: `An agent id (${AGENT_ID_PATTERN.source}), or "store" for the store's own services`
  })
)

/** An agent id: `^[A-Za-z0-9_-]{1,100}$`, and not "store" (the store scope's label in figures). */
export const AgentId = ScopeLabel.pipe(
  Schema.filter((id) => id !== "store", { message: () => "must not be \"store\" (the store scope's name in monitoring figures)" }),
  Schema.brand("AgentId")
).annotations({
  identifier: "AgentId",
  description: `An agent's id: ${AGENT_ID_PATTERN.source}, not "store"`,
  examples: ["agent-1"] as never,
  jsonSchema: {}
})
export type AgentId = typeof AgentId.Type

/** A non-empty string of at most 256 characters, branded: how a request names a tool or a service it looks up. */
const boundedName = <B extends string>(brand: B) =>
  text("must be a string").pipe(
    Schema.minLength(1, { message: () => "must not be empty" }),
    Schema.maxLength(256, { message: () => "must be at most 256 characters long" }),
    Schema.brand(brand)
  )

/** How a request names a tool: its callable name (`<service>__<tool>`), or its original name when unique in the scope. */
export const ToolName = boundedName("ToolName").annotations({
  identifier: "ToolName",
  description: "A tool's callable name (<service>__<tool>), or its original name when that is unique in the scope",
  examples: ["weather__get_forecast"] as never
})
export type ToolName = typeof ToolName.Type

/** How a request names a service it looks up: the service's name or its client_id (an exact name wins). */
export const ServiceRef = boundedName("ServiceRef").annotations({
  identifier: "ServiceRef",
  description: "A service's name, or its client_id (an exact service name wins over a client_id)",
  examples: ["weather"] as never
})
export type ServiceRef = typeof ServiceRef.Type

// ---------------------------------------------------------------------------------------------
// Service definitions
// ---------------------------------------------------------------------------------------------

/** Every spelling of a transport a definition may give (`transport`, or its synonym `type`). */
export const TRANSPORT_NAMES = ["streamable_http", "streamable-http", "streamableHttp", "http", "sse", "stdio"] as const

const TransportName = Schema.Literal(...TRANSPORT_NAMES).annotations({
  message: () => ({ message: "must be one of streamable_http, streamable-http, http, sse, stdio", override: true })
})

/** Normalises a transport spelling; undefined when it is not one we know. */
export const normaliseTransport = (t: string): "streamable_http" | "sse" | "stdio" | undefined => {
  switch (t) {
    case "streamable_http":
    case "streamable-http":
    case "streamableHttp":
    case "http":
      return "streamable_http"
    case "sse":
      return "sse"
    case "stdio":
      return "stdio"
    default:
      return undefined
  }
}

const isHttpUrl = (s: string): boolean => {
  const protocol = new URL(s).protocol
  return protocol === "http:" || protocol === "https:"
}

/** A URL that holds a `${VAR}` reference is checked once expanded, when the service connects (src/domain/references.ts). */
const holdsReference = (s: string): boolean => /\$\{[^}]+\}/.test(s)

const HttpUrl = text("must be a string").pipe(
  Schema.filter((s) => holdsReference(s) || URL.canParse(s), { message: () => "is not a valid URL" }),
  Schema.filter((s) => holdsReference(s) ? /^(?:https?:\/\/|\$\{)/i.test(s) : isHttpUrl(s), {
    message: () => "only http and https URLs are allowed",
    description: "The server's http(s) URL; a path ending in /sse means the SSE transport unless `transport` says otherwise",
    jsonSchema: {}
  })
)

/** An object of strings (headers, environment); each bad value is named (`env.A`). */
const StringRecord = (description: string) =>
  Schema.Record({ key: Schema.String, value: text("must be a string") }).annotations({
    message: () => "must be an object of strings",
    description
  })

/**
 * A program's command, arguments, environment and working directory reach it as C strings: a NUL
 * cannot be passed, and spawning refuses it with a message that quotes the value (a secret, maybe).
 */
const NUL_PROBLEM = "must not contain NUL"

const withoutNul = (description?: string) => <I, R>(self: Schema.Schema<string, I, R>) =>
  self.pipe(Schema.filter((s) => !s.includes("\0"), { message: () => NUL_PROBLEM, ...(description === undefined ? {} : { description, jsonSchema: {} }) }))

/** A program's environment: each value with a NUL is named (`env.A`); a name with one is not quoted. */
const Environment = StringRecord("Environment variables of the program, besides HOME, PATH and a few others (never shown back)").pipe(
  Schema.filter((env) =>
    Object.entries(env).flatMap(([name, value]): Array<Schema.FilterIssue> =>
      name.includes("\0") ? [{ path: [], message: "must not have a variable name that contains NUL" }] : value.includes("\0") ? [{ path: [name], message: NUL_PROBLEM }] : []
    )
  )
)

/** A list of globs over tool names (include_tools, exclude_tools): bounded, each glob compiled to check it. */
const ToolGlobs = (description: string) =>
  Schema.Array(Schema.String)
    .annotations({ message: () => ({ message: "must be an array of glob strings", override: true }) })
    .pipe(
      Schema.filter((globs) => globsProblem(globs), {
        description,
        jsonSchema: { maxItems: MAX_GLOBS, items: { type: "string", minLength: 1, maxLength: MAX_GLOB_LENGTH } }
      })
    )

const INCLUDE_TOOLS = "Globs over the service's tool names: only the tools they match are offered (listed and callable)"
const REQUIRE_APPROVAL = "Globs over the service's tool names: a call of a tool they match waits for an approval of exactly that tool with exactly those arguments (README, Approvals)"
const EXCLUDE_TOOLS = "Globs over the service's tool names: the tools they match are not offered (exclusion wins over include_tools)"
/** The most `roots` a definition may list. */
export const MAX_ROOTS = 100

/**
 * Headers the store sets itself, or that change how the connection or a proxy behaves: a
 * definition may not set them (an SSRF helper could otherwise smuggle a Host or a body length).
 */
export const FORBIDDEN_HEADERS: ReadonlyArray<string> = [
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "te",
  "trailer",
  "upgrade",
  "expect"
]

/** Why a header may not be set by a definition, or undefined when it may. */
export const headerProblem = (name: string, value: string): string | undefined => {
  const lower = name.toLowerCase()
  if (FORBIDDEN_HEADERS.includes(lower) || lower.startsWith("proxy-")) return `may not be set: the store sets ${JSON.stringify(name)} itself or it is a hop-by-hop header`
  if (/[\r\n\0]/.test(name) || /[\r\n\0]/.test(value)) return "must not contain CR, LF or NUL"
  if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) return "is not a valid header name"
  return undefined
}

const Headers = StringRecord("HTTP headers sent with every request to the server (never shown back); not Host, Content-Length, Transfer-Encoding, Connection or hop-by-hop headers").pipe(
  Schema.filter((headers) =>
    Object.entries(headers).flatMap(([name, value]): Array<Schema.FilterIssue> => {
      const problem = headerProblem(name, value)
      return problem === undefined ? [] : [{ path: [name], message: problem }]
    })
  )
)

/** The most header or environment names a definition's `per_user` may declare (each list). */
export const MAX_PER_USER_NAMES = 16

/** An environment variable's name, as `per_user.env` declares it. */
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/

const perUserNames = (what: string, problem: (name: string) => string | undefined) =>
  Schema.Array(Schema.String)
    .annotations({ message: () => ({ message: `must be an array of ${what} names`, override: true }) })
    .pipe(
      Schema.filter(
        (names): Array<Schema.FilterIssue> | boolean => {
          if (names.length === 0 || names.length > MAX_PER_USER_NAMES) return [{ path: [], message: `must list 1 to ${MAX_PER_USER_NAMES} ${what} names` }]
          const seen = new Set<string>()
          const issues: Array<Schema.FilterIssue> = []
          names.forEach((name, at) => {
            const why = problem(name) ?? (seen.has(name.toLowerCase()) ? "is listed twice" : undefined)
            seen.add(name.toLowerCase())
            if (why !== undefined) issues.push({ path: [at], message: why })
          })
          return issues.length === 0 ? true : issues
        },
        { jsonSchema: { minItems: 1, maxItems: MAX_PER_USER_NAMES } }
      )
    )

/**
 * `per_user`: the header names (a remote service) or environment names (a local one) whose values
 * each principal gives itself (PUT .../credentials/{service_name}), and/or `oauth: true` (a remote
 * service whose upstream each principal authorizes for itself: POST .../credentials/{service_name}/authorize);
 * README, Per-user credentials.
 */
const PerUser = Schema.Struct({
  headers: Schema.optionalWith(
    perUserNames("header", (name) => headerProblem(name, "")).annotations({ description: "Headers each principal gives its own value of (a remote service)" }),
    { exact: true }
  ),
  env: Schema.optionalWith(
    perUserNames("environment variable", (name) => (ENV_NAME.test(name) ? undefined : "is not a valid environment variable name")).annotations({
      description: "Environment variables each principal gives its own value of (a local service: one process per principal)"
    }),
    { exact: true }
  ),
  oauth: Schema.optionalWith(
    Schema.Literal(true).annotations({
      message: () => ({ message: "must be true (each principal authorizes the upstream's OAuth for itself), or left out", override: true }),
      description: "Each principal authorizes the remote upstream's OAuth for itself (POST /for_store/credentials/{service_name}/authorize); its calls carry its own bearer token"
    }),
    { exact: true }
  )
}).annotations({
  message: () => "must be an object with `headers`, `env` (arrays of names) and/or `oauth` (true)",
  description: "Credentials each principal (a key, a token's subject) brings itself, given with PUT /for_store/credentials/{service_name}; never shown back"
})

/** The longest `oauth.client_id` / `oauth.client_secret`, and the most scopes a definition may ask for. */
export const OAUTH_TEXT_MAX = 2_000
export const OAUTH_SCOPES_MAX = 50

const oauthText = (what: string) =>
  text(`must be a string (the ${what})`).pipe(
    Schema.filter((s) => s !== "" && s.length <= OAUTH_TEXT_MAX, { message: () => `must be a non-empty string of at most ${OAUTH_TEXT_MAX} characters` })
  )

/** The rules that tie the `oauth` fields together. */
const oauthProblems = (o: { readonly client_id?: string; readonly client_secret?: string; readonly grant_type?: string }): ReadonlyArray<Schema.FilterIssue> => {
  const problems: Array<Schema.FilterIssue> = []
  if (o.client_secret !== undefined && o.client_id === undefined) problems.push({ path: ["client_secret"], message: "needs \"client_id\": a secret belongs to a pre-registered client" })
  if (o.grant_type === "client_credentials") {
    if (o.client_id === undefined) problems.push({ path: ["client_id"], message: "is required with \"grant_type\": \"client_credentials\"" })
    if (o.client_secret === undefined) problems.push({ path: ["client_secret"], message: "is required with \"grant_type\": \"client_credentials\"" })
  }
  return problems
}

/**
 * A remote service's upstream OAuth (src/runtime/upstream-oauth.ts): a pre-registered client for the
 * authorization code flow, or machine credentials (`client_credentials`). Unknown fields are
 * refused (a misspelt `clientId` would otherwise silently fall back to dynamic registration).
 */
export const OAuthSettings = Schema.Struct({
  client_id: Schema.optionalWith(oauthText("pre-registered client's id"), { exact: true }),
  client_secret: Schema.optionalWith(oauthText("pre-registered client's secret"), { exact: true }),
  scopes: Schema.optionalWith(
    Schema.Array(
      text("must be a string").pipe(
        Schema.filter((s) => /^[\x21\x23-\x5B\x5D-\x7E]{1,200}$/.test(s), { message: () => "must be one scope: 1 to 200 printable characters, no space, quote or backslash" })
      )
    ).pipe(Schema.maxItems(OAUTH_SCOPES_MAX, { message: () => `must list at most ${OAUTH_SCOPES_MAX} scopes` })).annotations({
      message: () => `must be an array of at most ${OAUTH_SCOPES_MAX} scope strings`
    }),
    { exact: true }
  ),
  issuer: Schema.optionalWith(
    text("must be a string (the authorization server's issuer URL)").pipe(
      Schema.filter((s) => s.length <= OAUTH_TEXT_MAX && URL.canParse(s) && isHttpUrl(s), { message: () => "must be the authorization server's http(s) issuer URL" })
    ),
    { exact: true }
  ),
  grant_type: Schema.optionalWith(
    Schema.Literal("authorization_code", "client_credentials").annotations({
      message: () => ({ message: "must be \"authorization_code\" or \"client_credentials\"", override: true })
    }),
    { exact: true }
  )
})
  .annotations({ message: () => "must be an object", parseOptions: { onExcessProperty: "error", errors: "all" } })
  .pipe(
    Schema.filter((o) => oauthProblems(o), {
      description:
        "Upstream OAuth: `client_id` (and `client_secret`) of a pre-registered client, `scopes` to ask for, `issuer` (the only authorization server the client's credentials may be sent to; else the first one found for the service), and `grant_type` (`authorization_code`, the default, or `client_credentials` with `client_id` and `client_secret`); the secret is never shown back",
      jsonSchema: {}
    })
  )
export type OAuthSettings = typeof OAuthSettings.Type

/** The fields of a definition: a remote service (`url`) or a local one (`command`). */
const definitionFields = {
  url: Schema.optionalWith(HttpUrl, { exact: true }),
  transport: Schema.optionalWith(
    TransportName.annotations({ description: "streamable_http (also streamable-http, http) or sse; inferred from the URL when left out" }),
    { exact: true }
  ),
  type: Schema.optionalWith(TransportName.annotations({ description: "A synonym of transport used by common MCP client configs (stdio, http, sse)" }), {
    exact: true
  }),
  headers: Schema.optionalWith(Headers, { exact: true }),
  command: Schema.optionalWith(
    text("must be a non-empty string").pipe(
      Schema.filter((s) => s.trim() !== "", { message: () => "must be a non-empty string", description: "The program that runs a local (stdio) server", jsonSchema: {} }),
      withoutNul()
    ),
    { exact: true }
  ),
  args: Schema.optionalWith(
    Schema.Array(Schema.String)
      .annotations({
        message: () => ({ message: "must be an array of strings", override: true }),
        description: "The program's arguments"
      })
      .pipe(Schema.filter((args) => args.flatMap((arg, at): Array<Schema.FilterIssue> => (arg.includes("\0") ? [{ path: [at], message: NUL_PROBLEM }] : [])))),
    { exact: true }
  ),
  env: Schema.optionalWith(Environment, { exact: true }),
  cwd: Schema.optionalWith(text("must be a string").pipe(withoutNul("The program's working directory")), { exact: true }),
  roots: Schema.optionalWith(
    Schema.Array(
      Schema.String.pipe(
        Schema.filter((s) => /^file:\/\//.test(s) && URL.canParse(s) && s.length <= 4096, { message: () => "must be a file:// URI" })
      )
    ).pipe(Schema.maxItems(MAX_ROOTS, { message: () => `must be an array of at most ${MAX_ROOTS} file:// URIs` })).annotations({
      message: () => ({ message: `must be an array of at most ${MAX_ROOTS} file:// URIs`, override: true }),
      description: "The roots the store answers the server's roots/list with (file:// URIs); the roots capability is declared only with them"
    }),
    { exact: true }
  ),
  envFile: Schema.optionalWith(
    text("must be a string").annotations({
      description: "A dotenv file (path relative to the services file's folder) whose variables ${VAR} references may use, besides the store's environment"
    }),
    { exact: true }
  ),
  protocol_version: Schema.optionalWith(
    Schema.Literal(...PROTOCOL_VERSIONS).annotations({
      message: () => ({ message: `must be one of ${PROTOCOL_VERSIONS.map((v) => `"${v}"`).join(", ")}`, override: true }),
      description: "Pins the MCP protocol revision spoken with the server (2026-07-28, or a 2025-era one with the initialize handshake); negotiated when left out"
    }),
    { exact: true }
  ),
  disabled: Schema.optionalWith(
    Schema.Boolean.annotations({ message: () => "must be a boolean", description: "Set by disconnect_service: the service stays disconnected until restarted" }),
    { exact: true }
  ),
  include_tools: Schema.optionalWith(ToolGlobs(INCLUDE_TOOLS), { exact: true }),
  exclude_tools: Schema.optionalWith(ToolGlobs(EXCLUDE_TOOLS), { exact: true }),
  includeTools: Schema.optionalWith(ToolGlobs(`The Gemini CLI's name of include_tools (used when include_tools is absent)`), { exact: true }),
  excludeTools: Schema.optionalWith(ToolGlobs(`The Gemini CLI's name of exclude_tools (used when exclude_tools is absent)`), { exact: true }),
  require_approval: Schema.optionalWith(ToolGlobs(REQUIRE_APPROVAL), { exact: true }),
  oauth: Schema.optionalWith(OAuthSettings, { exact: true }),
  pin: Schema.optionalWith(
    // The modes of src/domain/pin-rules.ts (PIN_MODES), spelled here: that module reads definitions.
    Schema.Literal("strict", "warn", "off").annotations({
      message: () => ({ message: 'must be one of "strict", "warn", "off"', override: true }),
      description: "How the service's tool definitions are pinned (docs/tool-pins.md): strict holds a changed tool until accepted, warn tells and takes it, off pins nothing; --pin-tools when left out"
    }),
    { exact: true }
  ),
  per_user: Schema.optionalWith(PerUser, { exact: true })
}

/** Unknown extra fields of a definition: kept as they are (a file written by another MCP client survives a round trip). */
const Extras = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/** The rules that tie fields together: exactly one of url and command, and a transport that fits. */
const connectionProblems = (def: {
  readonly url?: string
  readonly command?: string
  readonly transport?: string
  readonly type?: string
  readonly oauth?: unknown
  readonly per_user?: { readonly headers?: ReadonlyArray<string>; readonly env?: ReadonlyArray<string>; readonly oauth?: true }
  readonly headers?: Readonly<Record<string, string>>
}): ReadonlyArray<Schema.FilterIssue> => {
  const problems: Array<Schema.FilterIssue> = []
  if ((def.url === undefined) === (def.command === undefined)) {
    problems.push({ path: ["url"], message: "exactly one of 'url' and 'command' is required" })
  }
  if (def.command !== undefined && def.oauth !== undefined) problems.push({ path: ["oauth"], message: "is for a remote ('url') service: a local one has no OAuth" })
  if (def.per_user !== undefined) {
    if (def.per_user.headers === undefined && def.per_user.env === undefined && def.per_user.oauth === undefined) problems.push({ path: ["per_user"], message: "must declare `headers`, `env` or `oauth`" })
    if (def.per_user.oauth !== undefined && def.command !== undefined) problems.push({ path: ["per_user", "oauth"], message: "is for a remote ('url') service: a local one has no OAuth" })
    if (def.per_user.oauth !== undefined && (def.oauth as { grant_type?: unknown } | undefined)?.grant_type === "client_credentials") {
      problems.push({ path: ["per_user", "oauth"], message: "needs the authorization code flow: a client_credentials service has one identity for every caller" })
    }
    if (def.per_user.oauth !== undefined && def.per_user.headers?.some((h) => h.toLowerCase() === "authorization") === true) {
      problems.push({ path: ["per_user", "headers"], message: "must not list Authorization beside `oauth`: the principal's bearer token is that header" })
    }
    // A shared Authorization header would be every caller's identity, the very thing per_user.oauth replaces.
    const shared = def.per_user.oauth !== undefined ? Object.keys(def.headers ?? {}).find((h) => h.toLowerCase() === "authorization") : undefined
    if (shared !== undefined) problems.push({ path: ["headers", shared], message: "must not be given beside per_user.oauth: each caller's own bearer token is that header" })
    if (def.per_user.headers !== undefined && def.command !== undefined) problems.push({ path: ["per_user", "headers"], message: "is for a remote ('url') service: a local one is given `env`" })
    if (def.per_user.env !== undefined && def.url !== undefined) problems.push({ path: ["per_user", "env"], message: "is for a local ('command') service: a remote one is given `headers`" })
  }
  const given = def.transport ?? def.type
  const transport = given === undefined ? undefined : normaliseTransport(given)
  if (def.url !== undefined && transport === "stdio") problems.push({ path: ["transport"], message: "stdio needs 'command', not 'url'" })
  if (def.command !== undefined && transport !== undefined && transport !== "stdio") {
    problems.push({ path: ["transport"], message: "a 'command' service uses stdio" })
  }
  return problems
}

const PROTO_KEY_PROBLEM = "is not allowed: \"__proto__\" is not a usable key"

/**
 * The path of the first `__proto__` key in a JSON value, if any. JSON.parse keeps it as a plain
 * key, but a copy by assignment (a decoder builds its output so) turns it into the copy's
 * prototype: a definition with `"__proto__": {"command": ...}` would then inherit a command.
 */
const protoKeyPath = (value: unknown): ParseResult.Path | undefined => {
  const pending: Array<{ readonly value: unknown; readonly path: ReadonlyArray<PropertyKey> }> = [{ value, path: [] }]
  // An array's keys are indices: numbers, so the path reads `args[0]`.
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    if (typeof next.value !== "object" || next.value === null) continue
    for (const [key, v] of Object.entries(next.value)) {
      const path = [...next.path, Array.isArray(next.value) ? Number(key) : key]
      if (key === "__proto__" && Arr.isNonEmptyReadonlyArray(path)) return path
      pending.push({ value: v, path })
    }
  }
  return undefined
}

/**
 * `schema`, refusing a value with a `__proto__` key anywhere before it is decoded (see
 * `protoKeyPath`). The OpenAPI document shows `schema` itself (its surrogate).
 */
const withoutProtoKeys = <A, I>(schema: Schema.Schema<A, I>, annotations: { readonly identifier: string }) =>
  Schema.declare(
    [schema],
    {
      decode: (inner) => {
        const decode = ParseResult.decodeUnknown(inner)
        return (input, options, ast) => {
          const at = protoKeyPath(input)
          return at === undefined ? decode(input, options) : ParseResult.fail(new ParseResult.Pointer(at, input, new ParseResult.Type(ast, input, PROTO_KEY_PROBLEM)))
        }
      },
      encode: (inner) => {
        const encode = ParseResult.encodeUnknown(inner)
        return (input, options) => encode(input, options)
      }
    },
    { ...annotations, [SchemaAST.SurrogateAnnotationId]: schema.ast }
  )

/** A definition struct: `fields`, extras kept, the connection rules; every problem reported, fields in the order given. */
const definitionStruct = <F extends Schema.Struct.Fields>(fields: F, notAnObject: string, description: string, examples: ReadonlyArray<object>) =>
  Schema.Struct(fields, Extras)
    .annotations({ message: () => notAnObject })
    .pipe(
      Schema.filter((def) => connectionProblems(def as Parameters<typeof connectionProblems>[0]), {
        description,
        examples: examples as never,
        jsonSchema: {},
        parseOptions: { errors: "all", propertyOrder: "original" }
      })
    )

const DEFINITION_DESCRIPTION =
  "A service definition: either `url` (optional `transport`, `headers`) or `command` (optional `args`, `env`, `cwd`), exactly one of the two. " +
  "`type` is a synonym of `transport`. Unknown extra fields are kept in the services file."

/** A service definition as the services file and `mcpServers` objects hold it (without its name). */
export const ServiceDefinition = withoutProtoKeys(
  definitionStruct(definitionFields, "must be an object", DEFINITION_DESCRIPTION, [
    { url: "http://127.0.0.1:8000/mcp" },
    { command: "npx", args: ["-y", "@modelcontextprotocol/server-everything"], env: { LOG_LEVEL: "info" } }
  ]),
  { identifier: "ServiceDefinition" }
)
export type ServiceDefinition = typeof ServiceDefinition.Type

const requiredName = Schema.propertySignature(ServiceName).annotations({ missingMessage: () => "is required and must be a string" })

/** A definition with its `name` (add_service, one definition or an array of them). */
export const NamedServiceDefinition = withoutProtoKeys(
  definitionStruct({ name: requiredName, ...definitionFields }, "must be an object", `${DEFINITION_DESCRIPTION} \`name\` names the service.`, [
    { name: "weather", url: "http://127.0.0.1:8000/mcp" },
    { name: "everything", command: "npx", args: ["-y", "@modelcontextprotocol/server-everything"] }
  ]),
  { identifier: "NamedServiceDefinition" }
)
export type NamedServiceDefinition = typeof NamedServiceDefinition.Type

/** update_service's body: a definition whose `name`, when given, is the name of the service updated. */
export const UpdateServiceBody = withoutProtoKeys(
  definitionStruct(
    { name: Schema.optionalWith(ServiceName, { exact: true }), ...definitionFields },
    "must be a service definition object",
    `${DEFINITION_DESCRIPTION} \`name\` may be left out; when given it must be the service's name.`,
    [{ url: "http://127.0.0.1:8001/mcp", headers: { Authorization: "Bearer ..." } }]
  ),
  { identifier: "UpdateServiceBody" }
)
export type UpdateServiceBody = typeof UpdateServiceBody.Type

/** `{"mcpServers": {name: definition, ...}}`, the format MCP clients use. */
const McpServersBody = Schema.Struct({
  mcpServers: Schema.Record({ key: ServiceName, value: ServiceDefinition }).annotations({ description: "Service definitions by name" })
}).annotations({ identifier: "McpServersBody" })

/** The three forms of add_service's body, as the OpenAPI document shows them. */
const AddServiceForms = Schema.Union(NamedServiceDefinition, McpServersBody, Schema.Array(NamedServiceDefinition))

/** What add_service's body decodes to: one of its three forms, every definition and name checked. */
export type AddServiceBody =
  | NamedServiceDefinition
  | { readonly mcpServers: Readonly<Record<string, ServiceDefinition>> }
  | ReadonlyArray<NamedServiceDefinition>

const isObject = (u: unknown): u is Readonly<Record<string, unknown>> => typeof u === "object" && u !== null && !Array.isArray(u)

const decodeNamed = ParseResult.decodeUnknownEither(NamedServiceDefinition)
const decodeDefinition = ParseResult.decodeUnknownEither(ServiceDefinition)
const decodeName = ParseResult.decodeUnknownEither(ServiceName)

/**
 * Decodes add_service's body by its shape first (an array, an object with `mcpServers`, else one
 * definition), so a bad body's problems name its fields (a union would only say that no member
 * matched). Every problem is reported: each entry's fields, its name, a name given twice.
 */
const decodeAddServiceBody = (input: unknown, _options: SchemaAST.ParseOptions, ast: SchemaAST.Declaration) => {
  const issues: Array<ParseResult.ParseIssue> = []
  const at = (path: ReadonlyArray<PropertyKey>, issue: ParseResult.ParseIssue) =>
    issues.push(path.length === 0 ? issue : new ParseResult.Pointer(path as ParseResult.Path, input, issue))
  const problem = (path: ReadonlyArray<PropertyKey>, actual: unknown, message: string) => at(path, new ParseResult.Type(ast, actual, message))
  const done = (output: AddServiceBody, count: number) => {
    if (count === 0 && issues.length === 0) problem([], input, "names no service")
    return issues.length === 0 ? ParseResult.succeed(output) : ParseResult.fail(new ParseResult.Composite(ast, input, issues as [ParseResult.ParseIssue, ...Array<ParseResult.ParseIssue>]))
  }
  const options = { errors: "all" } as const
  if (Array.isArray(input)) {
    const out: Array<NamedServiceDefinition> = []
    const seen = new Set<string>()
    input.forEach((item, i) => {
      const decoded = decodeNamed(item, options)
      if (Either.isLeft(decoded)) return at([i], decoded.left)
      const name = decoded.right.name
      if (seen.has(name)) problem([i, "name"], name, `'${name}' is given twice`)
      seen.add(name)
      out.push(decoded.right)
    })
    return done(out, input.length)
  }
  if (isObject(input) && Object.hasOwn(input, "mcpServers")) {
    const servers = input["mcpServers"]
    if (!isObject(servers)) {
      problem(["mcpServers"], servers, "must be an object of name to definition")
      return done({ mcpServers: {} }, 0)
    }
    const out: Record<string, ServiceDefinition> = Object.create(null)
    for (const [name, def] of Object.entries(servers)) {
      const checkedName = decodeName(name, options)
      if (Either.isLeft(checkedName)) at(["mcpServers", name, "name"], checkedName.left)
      const decoded = decodeDefinition(def, options)
      if (Either.isLeft(decoded)) at(["mcpServers", name], decoded.left)
      else if (Either.isRight(checkedName)) out[name] = decoded.right
    }
    return done({ mcpServers: out }, Object.keys(servers).length)
  }
  if (isObject(input)) {
    const decoded = decodeNamed(input, options)
    if (Either.isLeft(decoded)) at([], decoded.left)
    return done(Either.isRight(decoded) ? decoded.right : ({} as NamedServiceDefinition), 1)
  }
  problem([], input, "must be a service definition, {mcpServers: {...}} or an array of definitions")
  return done([], 1)
}

/**
 * add_service's body: one definition with `name`, `{"mcpServers": {name: definition}}`, or an
 * array of definitions with names. Decoded by shape (`decodeAddServiceBody`); the OpenAPI document
 * shows the three forms.
 */
export const AddServiceBody: Schema.Schema<AddServiceBody> = Schema.declare([], {
  decode: () => decodeAddServiceBody,
  encode: () => (input) => ParseResult.succeed(input as AddServiceBody)
}).annotations({
  identifier: "AddServiceBody",
  description: "A service definition with its name, or {\"mcpServers\": {name: definition}}, or an array of definitions with names",
  [SchemaAST.SurrogateAnnotationId]: AddServiceForms.ast
})

/** A definition and the name it is registered under. */
export interface NamedDefinition {
  readonly name: ServiceName
  readonly definition: ServiceDefinition
}

/** The definition without its `name` field (a name inside a definition is not part of it). */
const withoutName = (def: Readonly<Record<string, unknown>>): ServiceDefinition => {
  const { name: _name, ...definition } = def
  return definition as ServiceDefinition
}

/** The named definitions of a decoded add_service body, in the order given. */
export const namedDefinitions = (body: AddServiceBody): ReadonlyArray<NamedDefinition> => {
  if (Array.isArray(body)) return body.map((def: NamedServiceDefinition) => ({ name: def.name, definition: withoutName(def) }))
  if (Object.hasOwn(body, "mcpServers")) {
    return Object.entries((body as { readonly mcpServers: Readonly<Record<string, ServiceDefinition>> }).mcpServers).map(([name, def]) => ({ name: name as ServiceName, definition: withoutName(def) }))
  }
  const def = body as NamedServiceDefinition
  return [{ name: def.name, definition: withoutName(def) }]
}

// ---------------------------------------------------------------------------------------------
// Problems, in the contract's words
// ---------------------------------------------------------------------------------------------

/** A field and why it was refused (an error's `details.fields`). */
export interface FieldProblem {
  readonly field: string
  readonly problem: string
}

/** Longest field name or value a problem quotes (a hostile body may hold a 1 MiB key). */
const QUOTE_MAX = 100

const clip = (s: string): string => (s.length > QUOTE_MAX ? `${s.slice(0, QUOTE_MAX)}...` : s)

/** A path as a field name: `mcpServers.weather.url`, `[1].name`, `env.A`; the empty path is `body`. */
export const fieldName = (path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>((out, key) => (typeof key === "number" ? `${out}[${key}]` : out === "" ? clip(String(key)) : `${out}.${clip(String(key))}`), "") || "body"

/**
 * A value as the decoder's default message prints it (`"a=1"`, `[1]`, `{"a":1}`, `5`), in words:
 * what kind of JSON value it is.
 */
const kindOf = (printed: string): string => {
  if (printed.startsWith('"')) return "a string"
  if (printed === "[]") return "an empty array"
  if (printed === "{}") return "an empty object"
  if (printed.startsWith("[")) return "an array"
  if (printed.startsWith("{")) return "an object"
  if (printed === "null") return "null"
  if (printed === "undefined") return "nothing"
  if (printed === "true" || printed === "false") return "a boolean"
  if (/^-?(\d|Infinity|NaN)/.test(printed)) return "a number"
  return "another kind of value"
}

/**
 * What the decoder's default message says it expected (a schema printed as TypeScript, or a
 * refinement's description), in words; undefined for `undefined`, the other member of an optional
 * field's union, which says nothing to a client.
 */
const expectedWords = (printed: string): string | undefined => {
  if (printed === "undefined") return undefined
  if (printed === "string" || printed === "number" || printed === "boolean") return `a ${printed}`
  if (printed === "null") return "null"
  if (printed.startsWith("{")) return "an object"
  if (/^(ReadonlyArray<|Array<|readonly \[|\[)/.test(printed)) return "an array"
  if (/^(a|an) /.test(printed)) return printed
  if (/^"[^"]*"$/.test(printed) || /^-?\d/.test(printed) || printed === "true" || printed === "false") return printed
  return `valid (${clip(printed)})`
}

const DEFAULT_MESSAGE = /^Expected ([\s\S]*?), actual ([\s\S]*)$/
const DECODE_NUMBER = /^Unable to decode ([\s\S]*) into a number$/
const UNEXPECTED = /^is unexpected, expected: ([\s\S]*)$/

/** The problems of one field, from the issues the decoder reported for it. */
const problemsOf = (issues: ReadonlyArray<ParseResult.ArrayFormatterIssue>): Array<string> => {
  const own: Array<string> = []
  const expected: Array<string> = []
  let actual: string | undefined
  let showValue = false
  for (const issue of issues) {
    const message = issue.message
    if (issue._tag === "Missing") {
      own.push(message === "is missing" ? "is required" : message)
      continue
    }
    if (issue._tag === "Unexpected") {
      const allowed = UNEXPECTED.exec(message)?.[1]
      own.push(allowed === undefined ? "is not allowed" : `is unknown (allowed: ${allowed.replace(/"/g, "").split(" | ").join(", ")})`)
      continue
    }
    const number = DECODE_NUMBER.exec(message)
    if (number !== null) {
      expected.push("a number")
      actual = number[1]!
      showValue = true
      continue
    }
    const m = DEFAULT_MESSAGE.exec(message)
    if (m === null) {
      own.push(message)
      continue
    }
    const words = expectedWords(m[1]!)
    if (words === undefined) {
      actual ??= m[2]!
      continue
    }
    expected.push(words)
    actual = m[2]!
    if (issue._tag === "Refinement" || words.startsWith('"')) showValue = true
  }
  // A field's own messages (the domain's wording) say more than the decoder's default.
  if (own.length > 0 || expected.length === 0) return own.length > 0 ? [...new Set(own)] : actual !== undefined ? ["must be left out"] : []
  const literals = expected.filter((w) => w.startsWith('"')).map((w) => w.slice(1, -1))
  const others = [...new Set(expected.filter((w) => !w.startsWith('"')))]
  const alternatives = [...others, ...(literals.length === 1 ? [`"${literals[0]}"`] : literals.length > 1 ? [`one of ${literals.join(", ")}`] : [])]
  const got = actual === undefined ? "" : ` (got ${showValue && !/^[[{]/.test(actual) ? clip(actual) : kindOf(actual)})`
  return [`must be ${alternatives.join(" or ")}${got}`]
}

/** The field names of every proper prefix of the issues' paths (`a`, `a.b` for `a.b.c`): fields with issues inside them. */
const enclosingFields = (issues: ReadonlyArray<ParseResult.ArrayFormatterIssue>): Set<string> => {
  const out = new Set<string>()
  for (const issue of issues) for (let i = 0; i < issue.path.length; i++) out.add(fieldName(issue.path.slice(0, i)))
  return out
}

/**
 * Decode issues as field problems, in plain words (never the schema library's): each names its
 * field, once (a field's issues are read together: `must be a string or an object (got a number)`);
 * a missing field "is required", an unknown one "is unknown (allowed: ...)". A union member's
 * "Expected {...}" is left out where the member's own fields say what is wrong.
 */
export const fieldProblems = (issues: ReadonlyArray<ParseResult.ArrayFormatterIssue>): Array<FieldProblem> => {
  const groups = new Map<string, Array<ParseResult.ArrayFormatterIssue>>()
  const enclosing = enclosingFields(issues)
  for (const issue of issues) {
    const field = fieldName(issue.path)
    if (issue._tag === "Type" && enclosing.has(field) && DEFAULT_MESSAGE.test(issue.message)) continue
    const group = groups.get(field)
    if (group === undefined) groups.set(field, [issue])
    else group.push(issue)
  }
  const out: Array<FieldProblem> = []
  for (const [field, group] of groups) for (const problem of problemsOf(group)) out.push({ field, problem })
  return out
}

/** A field problem as a sentence: `missing field "service_name"`, `"args" must be an object (got a string)`. */
export const problemSentence = (p: FieldProblem): string => {
  if (p.problem === "is required") return `missing field "${p.field}"`
  if (p.problem.startsWith("is unknown")) return `unknown field "${p.field}"${p.problem.slice("is unknown".length)}`
  return p.field === "body" ? `the body ${p.problem}` : `"${p.field}" ${p.problem}`
}

/** How many problems a message spells out (details.fields lists them all, up to `MAX_FIELD_PROBLEMS`). */
const SENTENCES_MAX = 5
/** How many problems a refusal lists: a body of 100,000 unknown fields gets a bounded answer. */
export const MAX_FIELD_PROBLEMS = 50

/** The message of a refusal that lists `problems`: "Invalid request: " and the first few as sentences. */
export const problemsMessage = (problems: ReadonlyArray<FieldProblem>): string => {
  const shown = problems.slice(0, SENTENCES_MAX).map(problemSentence)
  const more = problems.length - shown.length
  return `Invalid request: ${shown.join("; ")}${more > 0 ? `; and ${more} more (see error.details.fields)` : ""}`
}

/** A decode failure as field problems. */
export const parseErrorProblems = (error: ParseResult.ParseError): Array<FieldProblem> =>
  fieldProblems(ParseResult.ArrayFormatter.formatErrorSync(error))

/** Why `schema` refuses a value (its first problem), or undefined when it accepts it. */
export const firstProblem = <A, I>(schema: Schema.Schema<A, I>): ((value: unknown) => string | undefined) => {
  const decode = Schema.decodeUnknownEither(schema)
  return (value) => {
    const decoded = decode(value)
    return Either.isLeft(decoded) ? parseErrorProblems(decoded.left)[0]?.problem : undefined
  }
}

/** Why a service name is refused, or undefined when it is valid. */
export const serviceNameProblem: (name: string) => string | undefined = firstProblem(ServiceName)

/** Why an agent id is refused, or undefined when it is valid. */
export const agentIdProblem: (id: string) => string | undefined = firstProblem(AgentId)
