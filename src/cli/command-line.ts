/**
 * The `mcp-store` command line (`mcp-store run api [options]`): reads the options from the command
 * line, the standalone config file or the `MCPSTORE_*` environment variables, and the defaults, in
 * that order of precedence. It never exits the process itself, so that the caller (bin/) decides how
 * to print an error and tests can assert on it.
 */
import { readFile } from "node:fs/promises"
import { resolve as resolvePath } from "node:path"
import { VERSION } from "../version.js"
import { Command, CommanderError, Option } from "commander"
import {
  checkOption,
  checkOptionValues,
  mergeOptionValues,
  optionFromText,
  OPTION_KEYS,
  OptionsError,
  resolveServerOptions,
  type ServerOptions,
  resolveStoreOptions,
  type OptionKey,
  type Options,
  type OptionValues
} from "../config/options.js"
import { jsonSyntaxProblem } from "../config/services-document.js"

/** Where each option is read from: its command-line flag, commander attribute and environment variables. */
interface OptionSource {
  readonly key: OptionKey
  readonly flag: string
  readonly attribute: string
  readonly env: ReadonlyArray<string>
}

/** The environment variable naming a standalone config file. */
export const STANDALONE_CONFIG_ENV = "MCPSTORE_STANDALONE_CONFIG"

/** The environment variable holding the cluster secret (replica mode). */
export const CLUSTER_SECRET_ENV = "MCPSTORE_CLUSTER_SECRET"

/** The environment variable holding the secret of the store's introspection client (`--auth-introspection-client-id`). */
export const INTROSPECTION_SECRET_ENV = "MCPSTORE_AUTH_INTROSPECTION_CLIENT_SECRET"

/** The caps (each `--max-...`, `MCPSTORE_MAX_...`), with their help text. */
const CAP_FLAGS: ReadonlyArray<readonly [OptionKey, string, string]> = [
  ["max_event_streams", "--max-event-streams", "concurrent /events and /inspect/events streams (default: 100)"],
  ["max_mcp_sessions", "--max-mcp-sessions", "open MCP sessions on /mcp; the oldest idle one is evicted (default: 1000)"],
  ["mcp_session_idle_seconds", "--mcp-session-idle-seconds", "close an MCP session idle this long (default: 1800)"],
  ["max_body_bytes", "--max-body-bytes", "request body limit in bytes (default: 1048576)"],
  ["max_connections", "--max-connections", "open client connections (default: 1000)"],
  ["max_message_bytes", "--max-message-bytes", "largest MCP message read from an upstream, in bytes (default: 16777216)"],
  ["max_services", "--max-services", "services across the store and every agent (default: 10000)"],
  ["max_services_per_request", "--max-services-per-request", "services one request may define (default: 100)"],
  ["max_waiters", "--max-waiters", "concurrent waits on services (default: 10000)"],
  ["max_held_calls", "--max-held-calls", "calls waiting at once for their callers' input, accept_input_required (default: 100)"],
  ["max_call_seconds", "--max-call-seconds", "longest a tool call may last, in seconds (MCP endpoints; caps call_tool's timeout) (default: 3600)"],
  ["tool_record_max_value_bytes", "--tool-record-max-value-bytes", "a call's parameters and result, each, as stored in records; longer ones are cut (default: 65536)"],
  ["max_async_calls", "--max-async-calls", "asynchronous calls (call_tool \"async\": true) running at once (default: 100)"],
  ["max_async_results", "--max-async-results", "finished asynchronous calls kept; the oldest are dropped beyond it (default: 1000)"],
  ["async_result_retention_seconds", "--async-result-retention-seconds", "seconds a finished asynchronous call is kept (default: 86400)"],
  ["async_results_max_bytes", "--async-results-max-bytes", "bytes of the kept asynchronous answers together; the oldest are dropped beyond it (default: 67108864)"],
  ["max_approvals", "--max-approvals", "calls waiting for an approval at once, require_approval (default: 100)"],
  ["max_approvals_per_key", "--max-approvals-per-key", "calls one key may have waiting for an approval at once (default: 10)"],
  ["approval_timeout_seconds", "--approval-timeout", "seconds a call waits for its approval before it ends approval_timeout (default: 300)"],
  ["per_user_connections", "--per-user-connections", "principals' own connections one per_user service keeps open at once (default: 16)"],
  ["per_user_idle_seconds", "--per-user-idle-seconds", "close a principal's own connection idle this long (default: 300)"]
]

const SOURCES: ReadonlyArray<OptionSource> = [
  { key: "host", flag: "--host", attribute: "host", env: ["MCPSTORE_HOST"] },
  { key: "port", flag: "--port", attribute: "port", env: ["MCPSTORE_PORT"] },
  { key: "reload", flag: "--reload", attribute: "reload", env: ["MCPSTORE_RELOAD"] },
  { key: "log_level", flag: "--log-level", attribute: "logLevel", env: ["MCPSTORE_LOG_LEVEL"] },
  { key: "log_format", flag: "--log-format", attribute: "logFormat", env: ["MCPSTORE_LOG_FORMAT"] },
  { key: "auto_open_browser", flag: "--open", attribute: "open", env: ["MCPSTORE_AUTO_OPEN_BROWSER", "MCPSTORE_OPEN"] },
  {
    key: "show_startup_info",
    flag: "--no-startup-info",
    attribute: "startupInfo",
    env: ["MCPSTORE_SHOW_STARTUP_INFO"]
  },
  { key: "mcp_config_file", flag: "--config", attribute: "config", env: ["MCPSTORE_CONFIG", "MCPSTORE_MCP_CONFIG_FILE"] },
  { key: "debug", flag: "--debug", attribute: "debug", env: ["MCPSTORE_DEBUG"] },
  {
    key: "tool_record_max_file_size",
    flag: "--tool-record-max-file-size",
    attribute: "toolRecordMaxFileSize",
    env: ["MCPSTORE_TOOL_RECORD_MAX_FILE_SIZE"]
  },
  {
    key: "tool_record_retention_days",
    flag: "--tool-record-retention-days",
    attribute: "toolRecordRetentionDays",
    env: ["MCPSTORE_TOOL_RECORD_RETENTION_DAYS"]
  },
  { key: "monitoring", flag: "--monitoring", attribute: "monitoring", env: ["MCPSTORE_MONITORING"] },
  { key: "api_key", flag: "--api-key", attribute: "apiKey", env: ["MCPSTORE_API_KEY"] },
  { key: "api_key_file", flag: "--api-key-file", attribute: "apiKeyFile", env: ["MCPSTORE_API_KEY_FILE"] },
  { key: "keys_file", flag: "--keys-file", attribute: "keysFile", env: ["MCPSTORE_KEYS_FILE"] },
  { key: "local_services", flag: "--no-local-services", attribute: "localServices", env: ["MCPSTORE_LOCAL_SERVICES"] },
  { key: "allowed_hosts", flag: "--allowed-hosts", attribute: "allowedHosts", env: ["MCPSTORE_ALLOWED_HOSTS"] },
  { key: "allowed_origins", flag: "--allowed-origins", attribute: "allowedOrigins", env: ["MCPSTORE_ALLOWED_ORIGINS"] },
  {
    key: "allow_remote_local_services",
    flag: "--allow-remote-local-services",
    attribute: "allowRemoteLocalServices",
    env: ["MCPSTORE_ALLOW_REMOTE_LOCAL_SERVICES"]
  },
  { key: "deny_by_default", flag: "--deny-by-default", attribute: "denyByDefault", env: ["MCPSTORE_DENY_BY_DEFAULT"] },
  { key: "auth_server", flag: "--auth-server", attribute: "authServer", env: ["MCPSTORE_AUTH_SERVER"] },
  { key: "auth_dev_loopback_clients", flag: "--auth-dev-loopback-clients", attribute: "authDevLoopbackClients", env: ["MCPSTORE_AUTH_DEV_LOOPBACK_CLIENTS"] },
  { key: "auth_dynamic_registration", flag: "--no-auth-dynamic-registration", attribute: "authDynamicRegistration", env: ["MCPSTORE_AUTH_DYNAMIC_REGISTRATION"] },
  { key: "public_url", flag: "--public-url", attribute: "publicUrl", env: ["MCPSTORE_PUBLIC_URL"] },
  { key: "tool_search_scopes", flag: "--tool-search-scopes", attribute: "toolSearchScopes", env: ["MCPSTORE_TOOL_SEARCH_SCOPES"] },
  { key: "always_visible_tools", flag: "--always-visible-tools", attribute: "alwaysVisibleTools", env: ["MCPSTORE_ALWAYS_VISIBLE_TOOLS"] },
  { key: "upstream_allow", flag: "--upstream-allow", attribute: "upstreamAllow", env: ["MCPSTORE_UPSTREAM_ALLOW"] },
  {
    key: "upstream_allow_metadata",
    flag: "--upstream-allow-metadata",
    attribute: "upstreamAllowMetadata",
    env: ["MCPSTORE_UPSTREAM_ALLOW_METADATA"]
  },
  { key: "redis_url", flag: "--redis-url", attribute: "redisUrl", env: ["MCPSTORE_REDIS_URL"] },
  { key: "cluster_name", flag: "--cluster-name", attribute: "clusterName", env: ["MCPSTORE_CLUSTER_NAME"] },
  { key: "advertise_url", flag: "--advertise-url", attribute: "advertiseUrl", env: ["MCPSTORE_ADVERTISE_URL"] },
  { key: "lease_ms", flag: "--lease-ms", attribute: "leaseMs", env: ["MCPSTORE_LEASE_MS"] },
  { key: "pin_tools", flag: "--pin-tools", attribute: "pinTools", env: ["MCPSTORE_PIN_TOOLS"] },
  { key: "pin_new_tools", flag: "--pin-new-tools", attribute: "pinNewTools", env: ["MCPSTORE_PIN_NEW_TOOLS"] },
  // The OpenTelemetry standard's variables work too, with the meaning they have for its exporters.
  { key: "otlp_endpoint", flag: "--otlp-endpoint", attribute: "otlpEndpoint", env: ["MCPSTORE_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"] },
  {
    key: "otlp_traces_endpoint",
    flag: "--otlp-traces-endpoint",
    attribute: "otlpTracesEndpoint",
    env: ["MCPSTORE_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
  },
  { key: "auth_issuer", flag: "--auth-issuer", attribute: "authIssuer", env: ["MCPSTORE_AUTH_ISSUER"] },
  {
    key: "auth_introspection_client_id",
    flag: "--auth-introspection-client-id",
    attribute: "authIntrospectionClientId",
    env: ["MCPSTORE_AUTH_INTROSPECTION_CLIENT_ID"]
  },
  { key: "auth_claim_map", flag: "--auth-claim-map", attribute: "authClaimMap", env: ["MCPSTORE_AUTH_CLAIM_MAP"] },
  ...CAP_FLAGS.map(([key, flag]) => ({
    key,
    flag,
    attribute: flag.slice(2).replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase()),
    env: [`MCPSTORE_${key.toUpperCase()}`]
  }))
]

/**
 * Thrown by `parseCommandLine` when the command line asked for something other than a start
 * (`--help`, `--version`, or no command, which prints the help on stderr): the text is already
 * printed, the caller should exit with `exitCode`.
 */
export class CommandLineExit extends Error {
  readonly _tag = "CommandLineExit"
  override readonly name = "CommandLineExit"
  constructor(
    readonly exitCode: number,
    message: string
  ) {
    super(message)
  }
}

/** Where `parseCommandLine` writes help and version text, and what relative paths resolve against. */
export interface CommandLineIo {
  readonly cwd?: string
  readonly writeOut?: (text: string) => void
  readonly writeErr?: (text: string) => void
}

const ENV_HELP = `
Every option can also be set with an environment variable MCPSTORE_<NAME>:
  MCPSTORE_HOST, MCPSTORE_PORT, MCPSTORE_RELOAD, MCPSTORE_LOG_LEVEL, MCPSTORE_LOG_FORMAT,
  MCPSTORE_AUTO_OPEN_BROWSER (or MCPSTORE_OPEN), MCPSTORE_SHOW_STARTUP_INFO,
  MCPSTORE_CONFIG (or MCPSTORE_MCP_CONFIG_FILE), MCPSTORE_DEBUG,
  MCPSTORE_TOOL_RECORD_MAX_FILE_SIZE, MCPSTORE_TOOL_RECORD_RETENTION_DAYS,
  MCPSTORE_MONITORING (JSON), MCPSTORE_API_KEY, MCPSTORE_API_KEY_FILE, MCPSTORE_KEYS_FILE,
  MCPSTORE_LOCAL_SERVICES,
  MCPSTORE_ALLOWED_HOSTS, MCPSTORE_ALLOWED_ORIGINS (comma lists), MCPSTORE_ALLOW_REMOTE_LOCAL_SERVICES,
  MCPSTORE_DENY_BY_DEFAULT, MCPSTORE_AUTH_SERVER, MCPSTORE_AUTH_DEV_LOOPBACK_CLIENTS,
  MCPSTORE_AUTH_DYNAMIC_REGISTRATION, MCPSTORE_PUBLIC_URL, MCPSTORE_MAX_EVENT_STREAMS, MCPSTORE_MAX_MCP_SESSIONS, MCPSTORE_MCP_SESSION_IDLE_SECONDS,
  MCPSTORE_MAX_BODY_BYTES, MCPSTORE_MAX_CONNECTIONS, MCPSTORE_MAX_MESSAGE_BYTES,
  MCPSTORE_MAX_SERVICES, MCPSTORE_MAX_SERVICES_PER_REQUEST, MCPSTORE_MAX_WAITERS,
  MCPSTORE_MAX_CALL_SECONDS, ${STANDALONE_CONFIG_ENV},
  MCPSTORE_REDIS_URL, MCPSTORE_CLUSTER_NAME, MCPSTORE_ADVERTISE_URL, MCPSTORE_LEASE_MS,
  MCPSTORE_PIN_TOOLS, MCPSTORE_PIN_NEW_TOOLS,
  MCPSTORE_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_ENDPOINT), MCPSTORE_OTLP_TRACES_ENDPOINT (or
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
  OTEL_EXPORTER_OTLP_HEADERS and OTEL_BSP_* are read by the OpenTelemetry SDK),
  MCPSTORE_PUBLIC_URL, MCPSTORE_AUTH_ISSUER, MCPSTORE_AUTH_CLAIM_MAP (JSON),
  MCPSTORE_AUTH_INTROSPECTION_CLIENT_ID, MCPSTORE_AUTH_INTROSPECTION_CLIENT_SECRET (its secret;
  environment only), MCPSTORE_CLUSTER_SECRET (replica mode; environment only, never on the command line).
Booleans accept true/false, 1/0, yes/no, on/off.

Precedence: command line > standalone config file (or, without one, environment) > defaults.
With a standalone config file, the environment variables are ignored.
The standalone config file is one JSON object with the keys
${OPTION_KEYS.join(", ")
  .replace(/(.{1,85})(, |$)/g, (_all, line: string, sep: string) => `  ${line}${sep.trim()}\n`)
  .trimEnd()}

Monitoring keys (all optional): health_check_seconds, tools_update_hours, reconnection_seconds,
cleanup_hours, enable_tools_update, enable_reconnection, update_tools_on_reconnection,
warning_check_seconds, ping_timeout_seconds, slow_response_ms, initialization_timeout_seconds,
reconnecting_failure_threshold, max_reconnect_attempts, unreachable_retry_seconds,
disconnection_timeout_seconds.

Example:
  mcp-store run api --port 18200 --config ./mcp.json --monitoring '{"health_check_seconds": 10}'
`

/** Builds the commander program; `onApi` receives the `run api` command once its options are parsed. */
const buildProgram = (io: CommandLineIo, onApi: (command: Command) => void): Command => {
  const program = new Command("mcp-store")
    .description("An HTTP store of MCP tool services for AI agents")
    .version(VERSION, "-V, --version", "print the version")
    .exitOverride()
    .configureOutput({
      writeOut: io.writeOut ?? ((text) => process.stdout.write(text)),
      writeErr: io.writeErr ?? ((text) => process.stderr.write(text)),
      // The error's message travels in the thrown error; the caller prints it.
      outputError: () => undefined
    })
    .showHelpAfterError(false)

  // Listed for the help only: src/main.ts hands `import` to src/cli/import-command.ts before parsing.
  program.command("import <file>").description("merge another MCP client's config file into the services file (see mcp-store import --help)")
  program.command("keys <command>").description("create, list and revoke API keys: keys create|list|revoke (see mcp-store keys --help)")
  program.command("auth <service>").description("authorize an OAuth-protected upstream of a running store (see mcp-store auth --help); auth approve-client|list-clients|revoke-client manage the built-in authorization server's clients")
  program.command("approvals [action]").description("list and decide the calls of a running store that wait for an approval: approvals list|approve|deny (see mcp-store approvals --help)")
  program.command("pins <action> <service>").description("show or accept the held tools of a service of a running store: pins show|accept (see mcp-store pins --help)")
  const run = program.command("run").description("run a part of the store")
  const api = run
    .command("api")
    .description("start the HTTP API server")
    .addOption(new Option("--host <address>", "listen address (default: 127.0.0.1; see --allow-remote-local-services)"))
    .addOption(new Option("--port <port>", "listen port, 0-65535 (default: 18200)"))
    .addOption(new Option("--reload", "watch the services file and apply hand edits (default: off)"))
    .addOption(new Option("--no-reload").hideHelp())
    .addOption(new Option("--log-level <level>", "debug, info, warning or error (default: info)"))
    .addOption(new Option("--log-format <format>", "text or json, for every line the store logs (default: text)"))
    .addOption(new Option("--open", "open the docs page in a browser once started (default: off)"))
    .addOption(new Option("--no-open").hideHelp())
    .addOption(new Option("--startup-info").hideHelp())
    .addOption(new Option("--no-startup-info", "do not print the startup information"))
    .addOption(new Option("--config <file>", "services configuration file (default: ./mcp.json)"))
    .addOption(new Option("--debug", "enable debug logging (default: off)"))
    .addOption(new Option("--no-debug").hideHelp())
    .addOption(new Option("--tool-record-max-file-size <mb>", "tool-record file limit in MB, -1 unlimited (default: 30)"))
    .addOption(new Option("--tool-record-retention-days <days>", "keep tool records for days, -1 never delete (default: 7)"))
    .addOption(new Option("--monitoring <json>", "monitoring settings as a JSON object (see below)"))
    .addOption(new Option("--standalone-config <file>", "read every option from this JSON file; ignores the environment"))
    .addOption(new Option("--api-key <key>", "require 'Authorization: Bearer <key>' on every route but GET /health"))
    .addOption(new Option("--api-key-file <file>", "a file whose first line is an admin key (keeps the key out of the process list)"))
    .addOption(new Option("--keys-file <file>", "the keys file of mcp-store keys (default: mcp-store.keys.json beside the services file)"))
    .addOption(new Option("--local-services").hideHelp())
    .addOption(new Option("--no-local-services", "refuse local (command) services over HTTP; the services file may still hold them"))
    .addOption(new Option("--allowed-hosts <list>", "extra Host values accepted (comma list; * for any) besides localhost, 127.0.0.1, [::1] and the listen address"))
    .addOption(new Option("--allowed-origins <list>", "extra Origin values accepted (comma list of https://host[:port]; * for any)"))
    .addOption(new Option("--allow-remote-local-services", "accept local (command) services from non-loopback clients without an API key (unsafe)"))
    .addOption(new Option("--no-allow-remote-local-services").hideHelp())
    .addOption(new Option("--deny-by-default", "an agent key without a tools list (keys create --tools) sees and calls no tool (default: off)"))
    .addOption(new Option("--no-deny-by-default").hideHelp())
    .addOption(new Option("--auth-server", "run the built-in OAuth 2.1 authorization server for the MCP endpoints (docs/oauth-server.md)"))
    .addOption(new Option("--no-auth-server").hideHelp())
    .addOption(new Option("--auth-dev-loopback-clients", "built-in authorization server: accept http client ids on a loopback address (tests, local development)"))
    .addOption(new Option("--no-auth-dev-loopback-clients").hideHelp())
    .addOption(new Option("--auth-dynamic-registration").hideHelp())
    .addOption(new Option("--no-auth-dynamic-registration", "built-in authorization server: refuse Dynamic Client Registration (client metadata documents only)"))
    .addOption(new Option("--public-url <url>", "the store's public base URL behind a proxy (https://store.example.com): OAuth resource URIs and the built-in authorization server's issuer are built on it (default: the listen URL)"))
    .addOption(new Option("--tool-search-scopes <globs>", "search mode on /mcp for these scopes (store, agent ids; comma list of globs): clients see search_tools and call_tool (default: none; ?tools=search per connection)"))
    .addOption(new Option("--always-visible-tools <globs>", "in search mode, also list these tools (comma list of globs over <service>__<tool>)"))
    .addOption(new Option("--upstream-allow <list>", "where remote services may point: comma list of CIDRs, addresses and host globs (default: anywhere but metadata addresses)"))
    .addOption(new Option("--upstream-allow-metadata", "let remote services point at link-local and cloud metadata addresses (169.254.0.0/16, fd00:ec2::254)"))
    .addOption(new Option("--no-upstream-allow-metadata").hideHelp())
    .addOption(new Option("--redis-url <url>", "replica mode: the replicas sharing this Redis (and --cluster-name) are one store (docs/replicas.md)"))
    .addOption(new Option("--cluster-name <name>", "replica mode: the cluster's name, the prefix of its Redis keys (default: mcp-store)"))
    .addOption(new Option("--advertise-url <url>", "replica mode: the base URL other replicas reach this one at (default: http://<host>:<port>)"))
    .addOption(new Option("--lease-ms <ms>", "replica mode: a service lease's time to live (default: 5000)"))
    .addOption(new Option("--pin-tools <mode>", "pinned tool definitions, for services without their own \"pin\": strict (a changed tool is held until accepted), warn, off (default: strict)"))
    .addOption(new Option("--pin-new-tools <rule>", "a new tool of an already pinned service: hold (as a change) or accept (default: hold)"))
    .addOption(new Option("--otlp-endpoint <url>", "export OpenTelemetry traces over OTLP/HTTP to <url>/v1/traces (default: off)"))
    .addOption(new Option("--otlp-traces-endpoint <url>", "export OpenTelemetry traces over OTLP/HTTP to <url> itself (over --otlp-endpoint; default: off)"))
    .addOption(new Option("--auth-issuer <url>", "accept the JWT access tokens of this OAuth authorization server (OpenID Connect discovery) on every route"))
    .addOption(new Option("--auth-introspection-client-id <id>", `accept the --auth-issuer's opaque access tokens too, asking its introspection endpoint as this client (its secret in ${"$"}MCPSTORE_AUTH_INTROSPECTION_CLIENT_SECRET)`))
    .addOption(new Option("--auth-claim-map <json>", 'the claims a token\'s role, agent_id, tools and scope are read from, e.g. {"role":"mcp_role"} (default: those names)'))
  for (const [, flag, help] of CAP_FLAGS) api.addOption(new Option(`${flag} <n>`, help))
  api
    .addHelpText("after", ENV_HELP)
    .action((_options: unknown, command: Command) => {
      onApi(command)
    })
  return program
}

/** The options given on the command line, checked; flags not given are absent. */
const commandLineValues = (command: Command): OptionValues => {
  const opts = command.opts<Record<string, unknown>>()
  const out: Record<string, unknown> = {}
  for (const source of SOURCES) {
    if (command.getOptionValueSource(source.attribute) !== "cli") continue
    const value = opts[source.attribute]
    out[source.key] =
      typeof value === "string"
        ? optionFromText(source.key, value, source.flag)
        : checkOption(source.key, value, source.flag)
  }
  return out as OptionValues
}

/** The options given by `MCPSTORE_*` variables, checked; empty variables count as not set. */
const environmentValues = (env: NodeJS.ProcessEnv): OptionValues => {
  const out: Record<string, unknown> = {}
  for (const source of SOURCES) {
    let found: { readonly name: string; readonly value: unknown } | undefined
    for (const name of source.env) {
      const text = env[name]
      if (text === undefined || text === "") continue
      const value = optionFromText(source.key, text, name)
      if (found !== undefined && JSON.stringify(found.value) !== JSON.stringify(value)) {
        throw new OptionsError(source.key, `${found.name} and ${name} both set ${source.key} but disagree; set only one`)
      }
      found ??= { name, value }
    }
    if (found !== undefined) out[source.key] = found.value
  }
  return out as OptionValues
}

/**
 * The server options with the introspection client's secret, read from the environment only (a
 * command line is visible to every local user): required with `--auth-introspection-client-id`,
 * which is refused without `--auth-issuer`.
 */
const withIntrospection = (server: ServerOptions, clientId: string | undefined, env: NodeJS.ProcessEnv): ServerOptions => {
  if (clientId === undefined) return server
  if (server.authIssuer === undefined) throw new OptionsError("auth_introspection_client_id", "needs --auth-issuer: the authorization server whose introspection endpoint is asked")
  const clientSecret = env[INTROSPECTION_SECRET_ENV]
  if (clientSecret === undefined || clientSecret === "") throw new OptionsError("auth_introspection_client_id", `needs the client's secret in ${INTROSPECTION_SECRET_ENV}`)
  return { ...server, authIntrospection: { clientId, clientSecret } }
}

/** The options of a standalone config file, checked. */
const standaloneValues = async (path: string): Promise<OptionValues> => {
  const where = `standalone config ${path}`
  let text: string
  try {
    text = await readFile(path, "utf8")
  } catch (e) {
    throw new OptionsError("standalone_config", `${where}: cannot be read (${(e as Error).message})`)
  }
  const json = text.replace(/^\uFEFF/, "")
  let parsed: unknown
  try {
    parsed = JSON.parse(json)
  } catch {
    // Its position and a reason only: JSON.parse's message quotes the text, which may hold a secret.
    throw new OptionsError("standalone_config", `${where}: not valid JSON (${jsonSyntaxProblem(json)})`)
  }
  return checkOptionValues(parsed, where)
}

const toOptionsError = (error: CommanderError): OptionsError => {
  const message = error.message.replace(/^error: /, "")
  const flag = /'(--?[A-Za-z0-9-]+)/.exec(message)?.[1]
  return new OptionsError(flag ?? "command line", message)
}

/**
 * Parses `mcp-store run api [options]` into the server and store options. `argv` is the user's
 * arguments only (`process.argv.slice(2)`); `env` supplies the `MCPSTORE_*` variables.
 *
 * Precedence: command line > standalone config file (`--standalone-config` or
 * `MCPSTORE_STANDALONE_CONFIG`; when present every other environment variable is ignored) >
 * environment > defaults. A relative services file path resolves against `io.cwd` (default
 * `process.cwd()`).
 *
 * Rejects with `OptionsError` for a bad value or a usage error (its message names the option and
 * where it came from), and with `CommandLineExit` after printing help or the version. Never exits.
 */
export const parseCommandLine = async (
  argv: ReadonlyArray<string>,
  env: NodeJS.ProcessEnv,
  io: CommandLineIo = {}
): Promise<Options> => {
  const cwd = io.cwd ?? process.cwd()
  let api: Command | undefined
  const program = buildProgram(io, (command) => {
    api = command
  })
  try {
    await program.parseAsync([...argv], { from: "user" })
  } catch (e) {
    if (!(e instanceof CommanderError)) throw e
    if (e.code === "commander.helpDisplayed" || e.code === "commander.version" || e.code === "commander.help") {
      throw new CommandLineExit(e.exitCode, e.message)
    }
    throw toOptionsError(e)
  }
  if (api === undefined) throw new CommandLineExit(1, "no command given")

  const cli = commandLineValues(api)
  const standaloneFlag = api.getOptionValueSource("standaloneConfig") === "cli"
  const standaloneText = standaloneFlag ? api.opts<Record<string, unknown>>()["standaloneConfig"] : env[STANDALONE_CONFIG_ENV]
  if (standaloneFlag && (typeof standaloneText !== "string" || standaloneText.trim() === "")) {
    throw new OptionsError("standalone_config", "--standalone-config must be the path of a JSON file")
  }
  const standaloneGiven = typeof standaloneText === "string" && standaloneText !== "" ? standaloneText : undefined
  const base =
    standaloneGiven !== undefined ? await standaloneValues(resolvePath(cwd, standaloneGiven)) : environmentValues(env)
  const values = mergeOptionValues(base, cli)
  const store = resolveStoreOptions(values, cwd)
  // The cluster secret is read from the environment only: a command line is visible to every local user.
  const secret = env[CLUSTER_SECRET_ENV]
  if (store.cluster !== undefined && secret !== undefined && secret !== "" && secret.length < 16) {
    throw new OptionsError("cluster_secret", `${CLUSTER_SECRET_ENV} must be at least 16 characters (got ${secret.length})`)
  }
  const withSecret = store.cluster !== undefined && secret !== undefined && secret !== "" ? { ...store, cluster: { ...store.cluster, secret } } : store
  return { server: withIntrospection(resolveServerOptions(values), values.auth_introspection_client_id, env), store: withSecret }
}
