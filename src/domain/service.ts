/**
 * Domain values of a service shared by every layer: statuses, transports, definitions and the
 * rules for names. Kept free of I/O so machines, runtime, config and HTTP can all import it.
 */
import { createHash } from "node:crypto"

/** Every status a service can have (shared/API.md, complete list). */
export const STATUSES = [
  "initializing",
  "healthy",
  "warning",
  "reconnecting",
  "unreachable",
  "disconnecting",
  "disconnected"
] as const
export type Status = (typeof STATUSES)[number]
export const isStatus = (s: unknown): s is Status => typeof s === "string" && (STATUSES as ReadonlyArray<string>).includes(s)

/** The transport actually used to reach a service. */
export type TransportType = "streamable_http" | "sse" | "stdio"

/**
 * A service definition as stored in the services file (without its name). Unknown extra fields are
 * kept as they are, so a file written by another MCP client survives a round trip.
 */
export interface ServiceDefinition {
  readonly url?: string
  /** `streamable_http`, `streamable-http`, `http` or `sse`; `type` is accepted as a synonym. */
  readonly transport?: string
  readonly type?: string
  readonly headers?: Readonly<Record<string, string>>
  readonly command?: string
  readonly args?: ReadonlyArray<string>
  readonly env?: Readonly<Record<string, string>>
  readonly cwd?: string
  /** Set by disconnect_service: the service stays disconnected until restarted. */
  readonly disabled?: boolean
  readonly [extra: string]: unknown
}

/** A definition resolved to what a connection needs. */
export type ResolvedDefinition =
  | {
      readonly kind: "remote"
      readonly transport: "streamable_http" | "sse"
      readonly url: string
      readonly headers: Readonly<Record<string, string>>
    }
  | {
      readonly kind: "local"
      readonly transport: "stdio"
      readonly command: string
      readonly args: ReadonlyArray<string>
      readonly env: Readonly<Record<string, string>>
      readonly cwd: string | undefined
    }

/** Which scope a service lives in: the store, or one agent. */
export type Scope = { readonly kind: "store" } | { readonly kind: "agent"; readonly agentId: string }
export const STORE_SCOPE: Scope = { kind: "store" }
export const agentScope = (agentId: string): Scope => ({ kind: "agent", agentId })
export const scopeLabel = (scope: Scope): string => (scope.kind === "store" ? "store" : scope.agentId)

export const SERVICE_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/
export const AGENT_ID_PATTERN = /^[A-Za-z0-9_-]{1,100}$/

/** Why a service name is refused, or undefined when it is valid. */
export const serviceNameProblem = (name: string): string | undefined => {
  if (!SERVICE_NAME_PATTERN.test(name)) {
    return "must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
  }
  if (name.includes("__")) return "must not contain '__'"
  if (name.includes("_byagent_")) return "must not contain '_byagent_'"
  return undefined
}

/** Why an agent id is refused, or undefined when it is valid. */
export const agentIdProblem = (id: string): string | undefined =>
  !AGENT_ID_PATTERN.test(id)
    ? "must match ^[A-Za-z0-9_-]{1,100}$"
    : id === "store"
      ? "must not be \"store\" (the store scope's name in monitoring figures)"
      : undefined

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

/**
 * Resolves a stored definition. Throws a `DefinitionError` listing each problem when the definition
 * is not usable (both or neither of url/command, a non-http URL, wrong types).
 */
export const resolveDefinition = (def: ServiceDefinition): ResolvedDefinition => {
  const problems: Array<{ field: string; problem: string }> = []
  const hasUrl = def.url !== undefined
  const hasCommand = def.command !== undefined
  if (hasUrl === hasCommand) {
    problems.push({ field: "url", problem: "exactly one of 'url' and 'command' is required" })
  }
  const transportGiven = def.transport ?? def.type
  let transport: "streamable_http" | "sse" | "stdio" | undefined
  if (transportGiven !== undefined) {
    transport = typeof transportGiven === "string" ? normaliseTransport(transportGiven) : undefined
    if (transport === undefined) {
      problems.push({
        field: def.transport !== undefined ? "transport" : "type",
        problem: "must be one of streamable_http, streamable-http, http, sse, stdio"
      })
    }
  }
  if (hasUrl) {
    if (typeof def.url !== "string") {
      problems.push({ field: "url", problem: "must be a string" })
    } else {
      let parsed: URL | undefined
      try {
        parsed = new URL(def.url)
      } catch {
        problems.push({ field: "url", problem: "is not a valid URL" })
      }
      if (parsed && parsed.protocol !== "http:" && parsed.protocol !== "https:") {
        problems.push({ field: "url", problem: "only http and https URLs are allowed" })
      }
      if (transport === "stdio") problems.push({ field: "transport", problem: "stdio needs 'command', not 'url'" })
    }
    checkStringRecord(def.headers, "headers", problems)
  }
  if (hasCommand) {
    if (typeof def.command !== "string" || def.command.trim() === "") {
      problems.push({ field: "command", problem: "must be a non-empty string" })
    }
    if (def.args !== undefined && (!Array.isArray(def.args) || def.args.some((a) => typeof a !== "string"))) {
      problems.push({ field: "args", problem: "must be an array of strings" })
    }
    checkStringRecord(def.env, "env", problems)
    if (def.cwd !== undefined && typeof def.cwd !== "string") problems.push({ field: "cwd", problem: "must be a string" })
    if (transport !== undefined && transport !== "stdio") {
      problems.push({ field: "transport", problem: "a 'command' service uses stdio" })
    }
  }
  if (def.disabled !== undefined && typeof def.disabled !== "boolean") {
    problems.push({ field: "disabled", problem: "must be a boolean" })
  }
  if (problems.length > 0) throw new DefinitionError(problems)
  if (hasUrl) {
    const url = def.url as string
    const inferred = new URL(url).pathname.replace(/\/+$/, "").endsWith("/sse") ? "sse" : "streamable_http"
    return {
      kind: "remote",
      transport: (transport as "streamable_http" | "sse" | undefined) ?? inferred,
      url,
      headers: def.headers ?? {}
    }
  }
  return {
    kind: "local",
    transport: "stdio",
    command: def.command as string,
    args: def.args ?? [],
    env: def.env ?? {},
    cwd: def.cwd
  }
}

const checkStringRecord = (
  value: unknown,
  field: string,
  problems: Array<{ field: string; problem: string }>
): void => {
  if (value === undefined) return
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    problems.push({ field, problem: "must be an object of strings" })
    return
  }
  for (const [k, v] of Object.entries(value)) {
    if (typeof v !== "string") problems.push({ field: `${field}.${k}`, problem: "must be a string" })
  }
}

/** A definition that cannot be used; `problems` names each field and why. */
export class DefinitionError extends Error {
  readonly _tag = "DefinitionError"
  constructor(readonly problems: ReadonlyArray<{ field: string; problem: string }>) {
    super(problems.map((p) => `${p.field}: ${p.problem}`).join("; "))
  }
}

/** Canonical JSON (sorted keys) so two equal definitions compare and hash equal. */
export const canonicalJson = (value: unknown): string =>
  JSON.stringify(value, (_k, v) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v
  )

/** Two definitions are the same connection when they agree on everything but `disabled`. */
export const sameDefinition = (a: ServiceDefinition, b: ServiceDefinition): boolean => {
  const { disabled: _a, ...ra } = a
  const { disabled: _b, ...rb } = b
  return canonicalJson(ra) === canonicalJson(rb)
}

/**
 * The 8 hex of a definition's hash, kept per definition object: a definition is never changed in
 * place (an update brings a new object), so a changed definition is hashed afresh.
 */
const definitionHashes = new WeakMap<ServiceDefinition, string>()

const definitionHash = (def: ServiceDefinition): string => {
  let hash = definitionHashes.get(def)
  if (hash === undefined) {
    const { disabled: _d, ...rest } = def
    hash = createHash("sha256").update(canonicalJson(rest)).digest("hex").slice(0, 8)
    definitionHashes.set(def, hash)
  }
  return hash
}

/** `client_store_<name>_<8 hex>` or `client_<agent>_<name>_<8 hex>` (shared/API.md). */
export const clientId = (scope: Scope, name: string, def: ServiceDefinition): string => {
  const hash = definitionHash(def)
  return scope.kind === "store" ? `client_store_${name}_${hash}` : `client_${scope.agentId}_${name}_${hash}`
}
