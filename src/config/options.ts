/**
 * The server start options and store options (README, Configuration), their defaults and their validation.
 * Every source (command line, environment, standalone config file) goes through the checks here, so
 * a bad value is refused the same way wherever it comes from, with a message naming the option.
 */
import { resolve as resolvePath } from "node:path"
import { defaultMonitoring, type MonitoringSettings } from "../domain/settings.js"
import { claimMapProblem, type ClaimMap } from "../domain/claim-map.js"
import { allowEntryProblem } from "../mcp/upstream-policy.js"
import { globsProblem } from "../domain/tool-filter.js"
import { CLUSTER_NAME_PATTERN } from "../domain/replicas.js"
import { LOG_FORMATS, type LogFormat } from "../logging/log.js"
import { VERSION } from "../version.js"
import { DEFAULT_PIN_SETTINGS, NEW_TOOL_RULES, PIN_MODES, type PinSettings } from "../domain/pin-rules.js"
import { jsonSyntaxProblem } from "./services-document.js"

/** Log verbosity; a stricter level shows fewer messages. */
export type LogLevel = "debug" | "info" | "warning" | "error"
export const LOG_LEVELS: ReadonlyArray<LogLevel> = ["debug", "info", "warning", "error"]
export { LOG_FORMATS, type LogFormat }

/** How the HTTP server is started. */
export interface ServerOptions {
  readonly host: string
  readonly port: number
  /** Watch the services file and apply hand edits. */
  readonly reload: boolean
  readonly logLevel: LogLevel
  /** How log lines are written: `text` (time, level, message) or `json` (one object a line). */
  readonly logFormat: LogFormat
  /** Open the docs page in a browser once listening. */
  readonly autoOpenBrowser: boolean
  readonly showStartupInfo: boolean
  /** When set, every route but `GET /health` needs `Authorization: Bearer <key>`. */
  readonly apiKey: string | undefined
  /** A file whose first line is one more admin key (`MCPSTORE_API_KEY_FILE`: no key in /proc/<pid>/cmdline). */
  readonly apiKeyFile?: string | undefined
  /** When false, `command` (local) services cannot be added or updated over HTTP. */
  readonly localServices: boolean
  /**
   * Extra `Host` values accepted besides the loopback names and the listen address (`name` or
   * `name:port`; `*` accepts any). Guards against DNS rebinding.
   */
  readonly allowedHosts: ReadonlyArray<string>
  /** Extra `Origin` values accepted besides the store's own loopback origins (`*` accepts any). */
  readonly allowedOrigins: ReadonlyArray<string>
  /** Accept local (command) services from non-loopback clients even without an API key. */
  readonly allowRemoteLocalServices: boolean
  /** An agent key without a `tools` list sees and calls no tool (README, Security: tool allow-lists). */
  readonly denyByDefault: boolean
  /** Scopes (`store`, agent ids; globs) whose `/mcp` is in search mode unless a request or its key says otherwise (README, Large catalogs). */
  readonly toolSearchScopes: ReadonlyArray<string>
  /** Tools (globs over callable names) listed in search mode beside `search_tools` and `call_tool`. */
  readonly alwaysVisibleTools: ReadonlyArray<string>
  /** Concurrent `/events` and `/inspect/events` streams. */
  readonly maxEventStreams: number
  /** Open MCP sessions on the `/mcp` endpoints; the oldest idle one is evicted at the cap. */
  readonly maxMcpSessions: number
  /** An MCP session with no request for this long is closed. */
  readonly mcpSessionIdleSeconds: number
  /** Request body limit, counted while the body streams in. */
  readonly maxBodyBytes: number
  /** Open client connections; a connection past the cap is answered 503 and closed. */
  readonly maxConnections: number
  /**
   * The store's public base URL (`--public-url`), when clients reach it through a proxy: the OAuth
   * resource URIs, metadata URLs and the built-in authorization server's issuer are built on it.
   * Undefined: the URL the store listens at.
   */
  readonly publicUrl?: string | undefined
  /** An external OAuth authorization server whose JWT access tokens the store accepts (`--auth-issuer`). */
  readonly authIssuer?: string | undefined
  /** Claim names other than the defaults for the tokens' role, agent_id, tools and scope (`--auth-claim-map`). */
  readonly authClaimMap?: Partial<ClaimMap> | undefined
  /**
   * The store's own client at `authIssuer`, with which it asks the issuer's introspection endpoint
   * (RFC 7662) about an opaque access token (`--auth-introspection-client-id`, whose secret the
   * command line reads from MCPSTORE_AUTH_INTROSPECTION_CLIENT_SECRET; a library caller sets this
   * itself). Undefined: only JWT access tokens are accepted.
   */
  readonly authIntrospection?: { readonly clientId: string; readonly clientSecret: string } | undefined
  /** The built-in OAuth 2.1 authorization server for the MCP endpoints (`--auth-server`, docs/oauth-server.md). */
  readonly authServer?: boolean | undefined
  /** Accept `http` client ids on a loopback address (`--auth-dev-loopback-clients`: tests and local development). */
  readonly authDevLoopbackClients?: boolean | undefined
  /** Dynamic Client Registration beside client metadata documents (on unless `--no-auth-dynamic-registration`). */
  readonly authDynamicRegistration?: boolean | undefined
}

/** Caps the store itself enforces, whoever calls it (HTTP, `/mcp`, the library API). */
export interface StoreLimits {
  /** One MCP message read from an upstream (an HTTP body, an SSE event, a stdio line). */
  readonly maxMessageBytes: number
  /** Services across the store and every agent. */
  readonly maxServices: number
  /** Services one add_service or update request may define. */
  readonly maxServicesPerRequest: number
  /** Concurrent waits (wait_service, add_service `?wait`, calls waiting for a service). */
  readonly maxWaiters: number
  /** Calls waiting at once for their callers' input (`accept_input_required`); beyond it, upstream requests are declined. */
  readonly maxHeldCalls: number
  /**
   * The longest a tool call may last, in seconds: the MCP endpoints' calls (which last while their
   * client's request is open) and REST calls' `timeout` alike; progress resets a call's time-out,
   * never past this.
   */
  readonly maxCallSeconds: number
  /** A call's parameters and result, each, as stored in records: longer ones are cut (and marked). */
  readonly toolRecordMaxValueBytes: number
  /** Asynchronous calls (`"async": true`) running at once. */
  readonly maxAsyncCalls: number
  /** Finished asynchronous calls kept; beyond it the oldest are dropped. */
  readonly maxAsyncResults: number
  /** Seconds a finished asynchronous call's answer is kept. */
  readonly asyncResultRetentionSeconds: number
  /** Bytes of JSON of the finished asynchronous calls' answers together; beyond it the oldest are dropped. */
  readonly asyncResultsMaxBytes: number
  /** Where remote services may point: CIDRs, addresses and host globs; empty: anywhere but metadata addresses. */
  readonly upstreamAllow: ReadonlyArray<string>
  /** Let remote services point at link-local and cloud metadata addresses (169.254.0.0/16, fd00:ec2::254). */
  readonly upstreamAllowMetadata: boolean
  /** Calls waiting for an approval at once (README, Approvals); beyond it a call that needs one is refused (429). */
  readonly maxApprovals: number
  /** Calls one key (one caller) may have waiting for an approval at once. */
  readonly maxApprovalsPerKey: number
  /** Seconds a call waits for its approval; then it ends `approval_timeout`. */
  readonly approvalTimeoutSeconds: number
  /** Principals' own connections one `per_user` service keeps open at once (README, Per-user credentials). */
  readonly perUserConnections: number
  /** Seconds an idle principal's connection stays open (fractions allowed). */
  readonly perUserIdleSeconds: number
}

/** How the store keeps its data. */
export interface StoreOptions {
  /** Absolute path of the services configuration file. */
  readonly mcpConfigFile: string
  /** The keys file (src/config/api-keys.ts); undefined: `mcp-store.keys.json` beside the services file. */
  readonly keysFile?: string | undefined
  readonly debug: boolean
  /** Megabytes (fractions allowed); -1 is unlimited. */
  readonly toolRecordMaxFileSize: number
  /** Days (fractions allowed); -1 is never delete. */
  readonly toolRecordRetentionDays: number
  readonly monitoring: MonitoringSettings
  readonly limits: StoreLimits
  /** Replica mode (docs/replicas.md): set by `--redis-url`; undefined: one store on its services file. */
  readonly cluster?: ClusterOptions | undefined
  /** OpenTelemetry traces over OTLP/HTTP (`--otlp-endpoint`, `--otlp-traces-endpoint`); undefined: tracing off. */
  readonly tracing?: { readonly url: string; readonly serviceVersion?: string | undefined } | undefined
  /** Pinned tool definitions (`--pin-tools`, `--pin-new-tools`; docs/tool-pins.md). */
  readonly pinTools: PinSettings
}

/** The replica mode's options (`--redis-url`, `--cluster-name`, `--advertise-url`, `--lease-ms`, MCPSTORE_CLUSTER_SECRET). */
export interface ClusterOptions {
  /** `redis://` or `rediss://` URL of the cluster's Redis. */
  readonly redisUrl: string
  /** The cluster's name: every key starts with `mcp-store:{<name>}:` (CLUSTER_NAME_PATTERN). */
  readonly name: string
  /** Where the other replicas reach this one; undefined: `http://<host>:<port>` once listening. */
  readonly advertiseUrl?: string | undefined
  /** The cluster secret (MCPSTORE_CLUSTER_SECRET); undefined: generated once and kept in Redis. */
  readonly secret?: string | undefined
  /** A service lease's time to live (ms, default 5000). */
  readonly leaseMs?: number | undefined
}

/** Both groups of options, as the program needs them. */
export interface Options {
  readonly server: ServerOptions
  readonly store: StoreOptions
}

/**
 * Checked option values by their specification (snake_case) names, each optional: one source's
 * contribution before defaults are filled in. `monitoring` holds only the keys that were given.
 */
export interface OptionValues {
  host?: string
  port?: number
  reload?: boolean
  log_level?: LogLevel
  log_format?: LogFormat
  auto_open_browser?: boolean
  show_startup_info?: boolean
  api_key?: string
  api_key_file?: string
  keys_file?: string
  local_services?: boolean
  allowed_hosts?: ReadonlyArray<string>
  allowed_origins?: ReadonlyArray<string>
  allow_remote_local_services?: boolean
  deny_by_default?: boolean
  auth_server?: boolean
  auth_dev_loopback_clients?: boolean
  auth_dynamic_registration?: boolean
  public_url?: string
  tool_search_scopes?: ReadonlyArray<string>
  always_visible_tools?: ReadonlyArray<string>
  max_event_streams?: number
  max_mcp_sessions?: number
  mcp_session_idle_seconds?: number
  max_body_bytes?: number
  max_connections?: number
  max_message_bytes?: number
  max_services?: number
  max_services_per_request?: number
  max_waiters?: number
  max_held_calls?: number
  max_call_seconds?: number
  tool_record_max_value_bytes?: number
  max_async_calls?: number
  max_async_results?: number
  async_result_retention_seconds?: number
  async_results_max_bytes?: number
  max_approvals?: number
  max_approvals_per_key?: number
  approval_timeout_seconds?: number
  per_user_connections?: number
  per_user_idle_seconds?: number
  upstream_allow?: ReadonlyArray<string>
  upstream_allow_metadata?: boolean
  redis_url?: string
  cluster_name?: string
  advertise_url?: string
  lease_ms?: number
  otlp_endpoint?: string
  otlp_traces_endpoint?: string
  auth_issuer?: string
  auth_claim_map?: Partial<ClaimMap>
  auth_introspection_client_id?: string
  pin_tools?: PinSettings["mode"]
  pin_new_tools?: PinSettings["newTools"]
  mcp_config_file?: string
  debug?: boolean
  tool_record_max_file_size?: number
  tool_record_retention_days?: number
  monitoring?: Partial<MonitoringSettings>
}

export type OptionKey = keyof OptionValues

/** The caps: each an integer >= 1 (`mcp_session_idle_seconds` and `per_user_idle_seconds` may be fractional). */
const CAP_KEYS = [
  "max_event_streams",
  "max_mcp_sessions",
  "mcp_session_idle_seconds",
  "max_body_bytes",
  "max_connections",
  "max_message_bytes",
  "max_services",
  "max_services_per_request",
  "max_waiters",
  "max_held_calls",
  "max_call_seconds",
  "tool_record_max_value_bytes",
  "max_async_calls",
  "max_async_results",
  "async_result_retention_seconds",
  "async_results_max_bytes",
  "max_approvals",
  "max_approvals_per_key",
  "approval_timeout_seconds",
  "per_user_connections",
  "per_user_idle_seconds"
] as const
type CapKey = (typeof CAP_KEYS)[number]
const isCapKey = (key: string): key is CapKey => (CAP_KEYS as ReadonlyArray<string>).includes(key)

/** Every option name accepted in a standalone config file, in their documented order. */
export const OPTION_KEYS: ReadonlyArray<OptionKey> = [
  "host",
  "port",
  "reload",
  "log_level",
  "log_format",
  "auto_open_browser",
  "show_startup_info",
  "mcp_config_file",
  "debug",
  "tool_record_max_file_size",
  "tool_record_retention_days",
  "monitoring",
  "api_key",
  "api_key_file",
  "keys_file",
  "local_services",
  "allowed_hosts",
  "allowed_origins",
  "allow_remote_local_services",
  "deny_by_default",
  "auth_server",
  "auth_dev_loopback_clients",
  "auth_dynamic_registration",
  "public_url",
  "tool_search_scopes",
  "always_visible_tools",
  "upstream_allow",
  "upstream_allow_metadata",
  "redis_url",
  "cluster_name",
  "advertise_url",
  "lease_ms",
  "otlp_endpoint",
  "otlp_traces_endpoint",
  "auth_issuer",
  "auth_claim_map",
  "auth_introspection_client_id",
  "pin_tools",
  "pin_new_tools",
  ...CAP_KEYS
]

/** Defaults of every option but `mcp_config_file`, which is `./mcp.json` resolved against the working folder. */
export const OPTION_DEFAULTS = {
  host: "127.0.0.1",
  port: 18200,
  reload: false,
  log_level: "info",
  log_format: "text",
  auto_open_browser: false,
  show_startup_info: true,
  local_services: true,
  mcp_config_file: "mcp.json",
  debug: false,
  tool_record_max_file_size: 30,
  tool_record_retention_days: 7,
  allow_remote_local_services: false,
  deny_by_default: false,
  max_event_streams: 100,
  max_mcp_sessions: 1000,
  mcp_session_idle_seconds: 1800,
  max_body_bytes: 1024 * 1024,
  max_connections: 1000,
  max_message_bytes: 16 * 1024 * 1024,
  max_services: 10_000,
  max_services_per_request: 100,
  max_waiters: 10_000,
  max_held_calls: 100,
  max_call_seconds: 3600,
  tool_record_max_value_bytes: 64 * 1024,
  max_async_calls: 100,
  max_async_results: 1000,
  async_result_retention_seconds: 86_400,
  async_results_max_bytes: 64 * 1024 * 1024,
  max_approvals: 100,
  max_approvals_per_key: 10,
  approval_timeout_seconds: 300,
  per_user_connections: 16,
  per_user_idle_seconds: 300,
  upstream_allow_metadata: false,
  cluster_name: "mcp-store",
  lease_ms: 5000
} as const

/** A refused option value. `option` is the option's name (`port`, `monitoring.health_check_seconds`). */
export class OptionsError extends Error {
  readonly _tag = "OptionsError"
  override readonly name = "OptionsError"
  constructor(
    readonly option: string,
    message: string
  ) {
    super(message)
  }
}

// Node timers (and so XState `after` delays) fire at once for delays above 2^31-1 ms.
const MAX_TIMER_MS = 2_147_483_647

type MonitoringRule =
  | { readonly kind: "interval"; readonly unit: "hours" | "seconds" | "ms" }
  | { readonly kind: "count" }
  | { readonly kind: "boolean" }

const MONITORING_RULES: { readonly [K in keyof MonitoringSettings]: MonitoringRule } = {
  health_check_seconds: { kind: "interval", unit: "seconds" },
  tools_update_hours: { kind: "interval", unit: "hours" },
  reconnection_seconds: { kind: "interval", unit: "seconds" },
  cleanup_hours: { kind: "interval", unit: "hours" },
  enable_tools_update: { kind: "boolean" },
  enable_reconnection: { kind: "boolean" },
  update_tools_on_reconnection: { kind: "boolean" },
  warning_check_seconds: { kind: "interval", unit: "seconds" },
  ping_timeout_seconds: { kind: "interval", unit: "seconds" },
  slow_response_ms: { kind: "interval", unit: "ms" },
  initialization_timeout_seconds: { kind: "interval", unit: "seconds" },
  reconnecting_failure_threshold: { kind: "count" },
  max_reconnect_attempts: { kind: "count" },
  unreachable_retry_seconds: { kind: "interval", unit: "seconds" },
  disconnection_timeout_seconds: { kind: "interval", unit: "seconds" }
}

/** Every key `monitoring` accepts (docs/lifecycle.md, Settings). */
export const MONITORING_KEYS = Object.keys(MONITORING_RULES) as ReadonlyArray<keyof MonitoringSettings>

const intervalMax = (unit: "hours" | "seconds" | "ms"): number =>
  unit === "ms" ? MAX_TIMER_MS : unit === "seconds" ? Math.floor(MAX_TIMER_MS / 1000) : Math.floor(MAX_TIMER_MS / 3_600_000)

const show = (value: unknown): string => {
  let text: string
  try {
    text = JSON.stringify(value) ?? String(value)
  } catch {
    text = String(value)
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text
}

const refuse = (option: string, requirement: string, got: unknown, source: string | undefined): OptionsError =>
  new OptionsError(option, `${source === undefined ? "" : `${source}: `}${option} ${requirement} (got ${show(got)})`)

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v)

const checkMonitoringValue = (key: keyof MonitoringSettings, value: unknown, source: string | undefined): number | boolean => {
  const rule = MONITORING_RULES[key]
  const option = `monitoring.${key}`
  switch (rule.kind) {
    case "boolean":
      if (typeof value !== "boolean") throw refuse(option, "must be true or false", value, source)
      return value
    case "count":
      if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
        throw refuse(option, "must be an integer >= 1", value, source)
      }
      return value
    case "interval": {
      const max = intervalMax(rule.unit)
      if (typeof value !== "number" || !Number.isFinite(value) || value <= 0 || value > max) {
        throw refuse(option, `must be a number > 0 and <= ${max} (${rule.unit}, fractions allowed)`, value, source)
      }
      return value
    }
  }
}

/**
 * Checks a (possibly partial) `monitoring` object: unknown keys, wrong types and out-of-range values
 * are refused with an `OptionsError` naming the key. Returns only the keys that were given.
 */
export const checkMonitoring = (given: unknown, source?: string): Partial<MonitoringSettings> => {
  if (!isPlainObject(given)) throw refuse("monitoring", "must be an object", given, source)
  const out: Record<string, number | boolean> = {}
  for (const [key, value] of Object.entries(given)) {
    if (!Object.hasOwn(MONITORING_RULES, key)) {
      throw new OptionsError(
        `monitoring.${key}`,
        `${source === undefined ? "" : `${source}: `}monitoring has no key "${key}" (known keys: ${MONITORING_KEYS.join(", ")})`
      )
    }
    out[key] = checkMonitoringValue(key as keyof MonitoringSettings, value, source)
  }
  return out as Partial<MonitoringSettings>
}

/**
 * The full monitoring settings from a partial `monitoring` object (docs/lifecycle.md, Settings):
 * checked as `checkMonitoring` does, then completed with the defaults; `warning_check_seconds` is
 * min(10, health_check_seconds) unless given.
 */
export const resolveMonitoring = (given: unknown, source?: string): MonitoringSettings =>
  defaultMonitoring(checkMonitoring(given ?? {}, source))

const checkLimit = (option: OptionKey, value: unknown, unit: string, source: string | undefined): number => {
  if (typeof value !== "number" || !Number.isFinite(value) || (value !== -1 && value <= 0)) {
    const never = option === "tool_record_max_file_size" ? "unlimited" : "never delete"
    throw refuse(option, `must be a number of ${unit} > 0, or -1 (${never})`, value, source)
  }
  return value
}

const checkLogLevel = (value: unknown, source: string | undefined): LogLevel => {
  const lower = typeof value === "string" ? value.trim().toLowerCase() : undefined
  const level = lower === "warn" ? "warning" : lower
  if (level === undefined || !(LOG_LEVELS as ReadonlyArray<string>).includes(level)) {
    throw refuse("log_level", `must be one of ${LOG_LEVELS.join(", ")}`, value, source)
  }
  return level as LogLevel
}

const checkLogFormat = (value: unknown, source: string | undefined): LogFormat => {
  const format = typeof value === "string" ? value.trim().toLowerCase() : undefined
  if (format === undefined || !(LOG_FORMATS as ReadonlyArray<string>).includes(format)) {
    throw refuse("log_format", `must be one of ${LOG_FORMATS.join(", ")}`, value, source)
  }
  return format as LogFormat
}

const checkText = (option: OptionKey, value: unknown, source: string | undefined): string => {
  if (typeof value !== "string" || value.trim() === "") throw refuse(option, "must be a non-empty string", value, source)
  return value
}

const checkBoolean = (option: OptionKey, value: unknown, source: string | undefined): boolean => {
  if (typeof value !== "boolean") throw refuse(option, "must be true or false", value, source)
  return value
}

const checkCap = (option: CapKey, value: unknown, source: string | undefined): number => {
  if (option === "mcp_session_idle_seconds" || option === "per_user_idle_seconds") {
    if (typeof value !== "number" || !Number.isFinite(value) || value <= 0 || value > Math.floor(MAX_TIMER_MS / 1000)) {
      throw refuse(option, `must be a number of seconds > 0 and <= ${Math.floor(MAX_TIMER_MS / 1000)}`, value, source)
    }
    return value
  }
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) throw refuse(option, "must be an integer >= 1", value, source)
  if (option === "max_call_seconds" && value > Math.floor(MAX_TIMER_MS / 1000)) {
    throw refuse(option, `must be an integer >= 1 and <= ${Math.floor(MAX_TIMER_MS / 1000)}`, value, source)
  }
  return value
}

/** A list of hosts or origins: an array of non-empty strings (or, as text, a comma list). */
const checkList = (option: OptionKey, value: unknown, source: string | undefined): ReadonlyArray<string> => {
  const items = typeof value === "string" ? value.split(",") : value
  if (!Array.isArray(items) || !items.every((item) => typeof item === "string")) {
    throw refuse(option, "must be a list of strings (a comma list as text)", value, source)
  }
  const out = items.map((item: string) => item.trim()).filter((item) => item !== "")
  if (option === "tool_search_scopes" || option === "always_visible_tools") {
    const problem = globsProblem(out)
    if (problem !== undefined) throw refuse(option, `must be a list of globs: ${problem}`, value, source)
    return out
  }
  for (const item of out) {
    if (option === "upstream_allow") {
      const problem = allowEntryProblem(item)
      if (problem !== undefined) throw refuse(option, `must hold CIDRs (10.0.0.0/8), addresses or host globs (*.example.com): ${JSON.stringify(item)} ${problem}`, item, source)
      continue
    }
    const valid = option === "allowed_origins" ? item === "*" || /^[a-z][a-z0-9+.-]*:\/\/[^/\s]+$/i.test(item) : !/[\s/]/.test(item)
    if (!valid) {
      throw refuse(option, option === "allowed_origins" ? "must hold origins such as https://app.example.com" : "must hold host names such as example.com or example.com:8080", item, source)
    }
  }
  return out
}

/** A URL of one of `protocols` with no credentials in the wrong place, no query and no fragment. */
const checkUrl = (option: OptionKey, value: unknown, protocols: ReadonlyArray<string>, source: string | undefined): string => {
  let url: URL | undefined
  try {
    url = typeof value === "string" ? new URL(value) : undefined
  } catch {
    url = undefined
  }
  if (url === undefined || !protocols.includes(url.protocol) || url.hostname === "" || url.hash !== "" || url.search !== "") {
    throw refuse(option, `must be a URL such as ${protocols[0]}//host:port`, option === "redis_url" ? "(a URL, not shown)" : value, source)
  }
  return value as string
}

/**
 * Checks one option value given with its JSON type (a number for `port`, a boolean for `reload`, an
 * object for `monitoring`...). Throws an `OptionsError` naming the option and what it accepts;
 * `source` (`--port`, `MCPSTORE_PORT`, a file) prefixes the message.
 */
export const checkOption = <K extends OptionKey>(key: K, value: unknown, source?: string): NonNullable<OptionValues[K]> => {
  const checked = ((): unknown => {
    switch (key) {
      case "host":
      case "mcp_config_file":
      case "api_key":
      case "api_key_file":
      case "keys_file":
        return checkText(key, value, source)
      case "port":
        if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > 65535) {
          throw refuse("port", "must be an integer from 0 to 65535", value, source)
        }
        return value
      case "reload":
      case "auto_open_browser":
      case "show_startup_info":
      case "local_services":
      case "debug":
        return checkBoolean(key, value, source)
      case "log_level":
        return checkLogLevel(value, source)
      case "log_format":
        return checkLogFormat(value, source)
      case "tool_record_max_file_size":
        return checkLimit(key, value, "megabytes", source)
      case "tool_record_retention_days":
        return checkLimit(key, value, "days", source)
      case "monitoring":
        return checkMonitoring(value, source)
      case "allowed_hosts":
      case "allowed_origins":
      case "upstream_allow":
      case "tool_search_scopes":
      case "always_visible_tools":
        return checkList(key, value, source)
      case "allow_remote_local_services":
      case "deny_by_default":
      case "auth_server":
      case "auth_dev_loopback_clients":
      case "auth_dynamic_registration":
      case "upstream_allow_metadata":
        return checkBoolean(key, value, source)
      case "public_url": {
        const url = checkUrl(key, value, ["http:", "https:"], source)
        const parsed = new URL(url)
        if (parsed.search !== "" || parsed.hash !== "" || parsed.username !== "" || parsed.password !== "") throw refuse(key, "must be a base URL without query, fragment or credentials (https://store.example.com)", value, source)
        // A base URL: no trailing slash, so that resource URIs are `<public_url>/mcp`.
        return url.replace(/\/+$/, "")
      }
      case "redis_url":
        return checkUrl(key, value, ["redis:", "rediss:"], source)
      case "advertise_url": {
        const url = checkUrl(key, value, ["http:", "https:"], source)
        if (new URL(url).pathname !== "/") throw refuse(key, "must be a base URL with no path (http://10.0.0.5:18200)", value, source)
        return url.replace(/\/$/, "")
      }
      case "auth_issuer": {
        const url = checkUrl(key, value, ["https:", "http:"], source)
        if (new URL(url).username !== "" || new URL(url).password !== "") throw refuse(key, "must be an issuer URL with no credentials", "(a URL, not shown)", source)
        // Kept exactly as given: a token's `iss` must be this very string.
        return url
      }
      case "auth_introspection_client_id":
        // A client id goes into a Basic authorization header: printable ASCII, bounded.
        if (typeof value !== "string" || !/^[\x21-\x7e]{1,255}$/.test(value)) throw refuse(key, "must be a client id of 1 to 255 printable characters, no spaces", value, source)
        return value
      case "auth_claim_map": {
        const problem = claimMapProblem(value)
        if (problem !== undefined) throw refuse(key, problem, value, source)
        return value
      }
      case "pin_tools":
      case "pin_new_tools": {
        const allowed: ReadonlyArray<string> = key === "pin_tools" ? PIN_MODES : NEW_TOOL_RULES
        const word = typeof value === "string" ? value.trim().toLowerCase() : undefined
        if (word === undefined || !allowed.includes(word)) throw refuse(key, `must be one of ${allowed.join(", ")}`, value, source)
        return word
      }
      case "otlp_endpoint":
        // The OTLP/HTTP base URL, as OTEL_EXPORTER_OTLP_ENDPOINT: `/v1/traces` is appended.
        return checkUrl(key, value, ["http:", "https:"], source).replace(/\/+$/, "")
      case "otlp_traces_endpoint":
        // The traces URL itself, as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: used as given.
        return checkUrl(key, value, ["http:", "https:"], source)
      case "cluster_name":
        if (typeof value !== "string" || !CLUSTER_NAME_PATTERN.test(value)) {
          throw refuse(key, "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", value, source)
        }
        return value
      case "lease_ms":
        if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 300 || value > 600_000) {
          throw refuse(key, "must be an integer of milliseconds from 300 to 600000", value, source)
        }
        return value
      default:
        if (isCapKey(key)) return checkCap(key, value, source)
        throw new OptionsError(String(key), `unknown option "${String(key)}"`)
    }
  })()
  return checked as NonNullable<OptionValues[K]>
}

const TRUE_WORDS = ["true", "1", "yes", "on"]
const FALSE_WORDS = ["false", "0", "no", "off"]

/**
 * Checks one option value given as text (a command-line argument or an environment variable):
 * numbers and booleans (`true/false/1/0/yes/no/on/off`) are converted, `monitoring` is parsed as
 * JSON, then the value is checked as `checkOption` does.
 */
export const optionFromText = <K extends OptionKey>(key: K, text: string, source?: string): NonNullable<OptionValues[K]> => {
  const asNumber = () => {
    const n = text.trim() === "" ? Number.NaN : Number(text)
    return checkOption(key, Number.isFinite(n) ? n : text, source)
  }
  if (isCapKey(key)) return asNumber()
  switch (key) {
    case "port":
      return checkOption(key, /^\s*\d+\s*$/.test(text) ? Number(text) : text, source)
    case "tool_record_max_file_size":
    case "tool_record_retention_days":
    case "lease_ms":
      return asNumber()
    case "reload":
    case "auto_open_browser":
    case "show_startup_info":
    case "local_services":
    case "allow_remote_local_services":
    case "deny_by_default":
    case "auth_server":
    case "auth_dev_loopback_clients":
    case "auth_dynamic_registration":
    case "upstream_allow_metadata":
    case "debug": {
      const word = text.trim().toLowerCase()
      if (TRUE_WORDS.includes(word)) return checkOption(key, true, source)
      if (FALSE_WORDS.includes(word)) return checkOption(key, false, source)
      throw refuse(key, "must be true or false (or 1/0, yes/no, on/off)", text, source)
    }
    case "monitoring":
    case "auth_claim_map": {
      let parsed: unknown
      try {
        parsed = JSON.parse(text)
      } catch {
        throw new OptionsError(key, `${source === undefined ? "" : `${source}: `}${key} must be a JSON object (${jsonSyntaxProblem(text)})`)
      }
      return checkOption(key, parsed, source)
    }
    default:
      return checkOption(key, text, source)
  }
}

/**
 * Checks an object of options by their specification names (the content of a standalone config
 * file). Unknown keys are refused; absent keys stay absent.
 */
export const checkOptionValues = (given: unknown, source?: string): OptionValues => {
  const prefix = source === undefined ? "" : `${source}: `
  if (!isPlainObject(given)) {
    throw new OptionsError("standalone_config", `${prefix}the options must be a JSON object (got ${show(given)})`)
  }
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(given)) {
    if (!(OPTION_KEYS as ReadonlyArray<string>).includes(key)) {
      throw new OptionsError(key, `${prefix}unknown option "${key}" (known options: ${OPTION_KEYS.join(", ")})`)
    }
    out[key] = checkOption(key as OptionKey, value, source)
  }
  return out as OptionValues
}

/**
 * Merges checked option values; a later layer wins over an earlier one, key by key. `monitoring` is
 * merged key by key too, so `--monitoring '{"health_check_seconds": 5}'` keeps the other keys a
 * standalone config gave.
 */
export const mergeOptionValues = (...layers: ReadonlyArray<OptionValues>): OptionValues => {
  const out: OptionValues = {}
  for (const layer of layers) {
    for (const key of OPTION_KEYS) {
      const value = layer[key]
      if (value === undefined) continue
      if (key === "monitoring") {
        out.monitoring = { ...out.monitoring, ...(value as Partial<MonitoringSettings>) }
      } else {
        ;(out as Record<string, unknown>)[key] = value
      }
    }
  }
  return out
}

/** The server start options from checked values, defaults filled in. */
export const resolveServerOptions = (given: OptionValues): ServerOptions => ({
  host: given.host ?? OPTION_DEFAULTS.host,
  port: given.port ?? OPTION_DEFAULTS.port,
  reload: given.reload ?? OPTION_DEFAULTS.reload,
  logLevel: given.log_level ?? OPTION_DEFAULTS.log_level,
  logFormat: given.log_format ?? OPTION_DEFAULTS.log_format,
  autoOpenBrowser: given.auto_open_browser ?? OPTION_DEFAULTS.auto_open_browser,
  showStartupInfo: given.show_startup_info ?? OPTION_DEFAULTS.show_startup_info,
  apiKey: given.api_key,
  ...(given.api_key_file === undefined ? {} : { apiKeyFile: given.api_key_file }),
  localServices: given.local_services ?? OPTION_DEFAULTS.local_services,
  allowedHosts: given.allowed_hosts ?? [],
  allowedOrigins: given.allowed_origins ?? [],
  allowRemoteLocalServices: given.allow_remote_local_services ?? OPTION_DEFAULTS.allow_remote_local_services,
  denyByDefault: given.deny_by_default ?? OPTION_DEFAULTS.deny_by_default,
  toolSearchScopes: given.tool_search_scopes ?? [],
  alwaysVisibleTools: given.always_visible_tools ?? [],
  maxEventStreams: given.max_event_streams ?? OPTION_DEFAULTS.max_event_streams,
  maxMcpSessions: given.max_mcp_sessions ?? OPTION_DEFAULTS.max_mcp_sessions,
  mcpSessionIdleSeconds: given.mcp_session_idle_seconds ?? OPTION_DEFAULTS.mcp_session_idle_seconds,
  maxBodyBytes: given.max_body_bytes ?? OPTION_DEFAULTS.max_body_bytes,
  maxConnections: given.max_connections ?? OPTION_DEFAULTS.max_connections,
  ...(given.public_url === undefined ? {} : { publicUrl: given.public_url }),
  ...(given.auth_issuer === undefined ? {} : { authIssuer: given.auth_issuer }),
  ...(given.auth_claim_map === undefined ? {} : { authClaimMap: given.auth_claim_map }),
  ...(given.auth_server === undefined ? {} : { authServer: given.auth_server }),
  ...(given.auth_dev_loopback_clients === undefined ? {} : { authDevLoopbackClients: given.auth_dev_loopback_clients }),
  ...(given.auth_dynamic_registration === undefined ? {} : { authDynamicRegistration: given.auth_dynamic_registration })
})

/** The store's caps from checked values, defaults filled in. */
export const resolveStoreLimits = (given: OptionValues): StoreLimits => ({
  maxMessageBytes: given.max_message_bytes ?? OPTION_DEFAULTS.max_message_bytes,
  maxServices: given.max_services ?? OPTION_DEFAULTS.max_services,
  maxServicesPerRequest: given.max_services_per_request ?? OPTION_DEFAULTS.max_services_per_request,
  maxWaiters: given.max_waiters ?? OPTION_DEFAULTS.max_waiters,
  maxHeldCalls: given.max_held_calls ?? OPTION_DEFAULTS.max_held_calls,
  maxCallSeconds: given.max_call_seconds ?? OPTION_DEFAULTS.max_call_seconds,
  toolRecordMaxValueBytes: given.tool_record_max_value_bytes ?? OPTION_DEFAULTS.tool_record_max_value_bytes,
  maxAsyncCalls: given.max_async_calls ?? OPTION_DEFAULTS.max_async_calls,
  maxAsyncResults: given.max_async_results ?? OPTION_DEFAULTS.max_async_results,
  asyncResultRetentionSeconds: given.async_result_retention_seconds ?? OPTION_DEFAULTS.async_result_retention_seconds,
  asyncResultsMaxBytes: given.async_results_max_bytes ?? OPTION_DEFAULTS.async_results_max_bytes,
  upstreamAllow: given.upstream_allow ?? [],
  upstreamAllowMetadata: given.upstream_allow_metadata ?? OPTION_DEFAULTS.upstream_allow_metadata,
  maxApprovals: given.max_approvals ?? OPTION_DEFAULTS.max_approvals,
  maxApprovalsPerKey: given.max_approvals_per_key ?? OPTION_DEFAULTS.max_approvals_per_key,
  approvalTimeoutSeconds: given.approval_timeout_seconds ?? OPTION_DEFAULTS.approval_timeout_seconds,
  perUserConnections: given.per_user_connections ?? OPTION_DEFAULTS.per_user_connections,
  perUserIdleSeconds: given.per_user_idle_seconds ?? OPTION_DEFAULTS.per_user_idle_seconds
})

/**
 * The store options from checked values, defaults filled in; a relative `mcp_config_file` is
 * resolved against `cwd`.
 */
export const resolveStoreOptions = (given: OptionValues, cwd: string = process.cwd()): StoreOptions => ({
  mcpConfigFile: resolvePath(cwd, given.mcp_config_file ?? OPTION_DEFAULTS.mcp_config_file),
  ...(given.keys_file === undefined ? {} : { keysFile: resolvePath(cwd, given.keys_file) }),
  debug: given.debug ?? OPTION_DEFAULTS.debug,
  toolRecordMaxFileSize: given.tool_record_max_file_size ?? OPTION_DEFAULTS.tool_record_max_file_size,
  toolRecordRetentionDays: given.tool_record_retention_days ?? OPTION_DEFAULTS.tool_record_retention_days,
  monitoring: defaultMonitoring(given.monitoring ?? {}),
  limits: resolveStoreLimits(given),
  ...(given.redis_url === undefined ? {} : { cluster: resolveClusterOptions(given, given.redis_url) }),
  ...tracingOf(given),
  pinTools: { mode: given.pin_tools ?? DEFAULT_PIN_SETTINGS.mode, newTools: given.pin_new_tools ?? DEFAULT_PIN_SETTINGS.newTools }
})

/**
 * Where traces go, if anywhere: the traces URL as given (`otlp_traces_endpoint`), else the base URL's
 * `/v1/traces` (`otlp_endpoint`); as in OpenTelemetry's own variables, the signal's URL wins.
 */
const tracingOf = (given: OptionValues): Pick<StoreOptions, "tracing"> => {
  const url = given.otlp_traces_endpoint ?? (given.otlp_endpoint === undefined ? undefined : `${given.otlp_endpoint}/v1/traces`)
  return url === undefined ? {} : { tracing: { url, serviceVersion: VERSION } }
}

/** The replica mode's options when `redis_url` is given (the secret comes from the environment, see src/cli/command-line.ts). */
const resolveClusterOptions = (given: OptionValues, redisUrl: string): ClusterOptions => ({
  redisUrl,
  name: given.cluster_name ?? OPTION_DEFAULTS.cluster_name,
  advertiseUrl: given.advertise_url,
  leaseMs: given.lease_ms ?? OPTION_DEFAULTS.lease_ms
})

/**
 * Every option from one object of specification names (as in a standalone config file): checked,
 * then completed with the defaults. For starting the store from code and for tests.
 */
export const resolveOptions = (given: unknown = {}, cwd: string = process.cwd(), source?: string): Options => {
  const values = checkOptionValues(given, source)
  return { server: resolveServerOptions(values), store: resolveStoreOptions(values, cwd) }
}
