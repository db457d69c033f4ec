/**
 * Domain values of a service shared by every layer: scopes, resolved definitions, client ids.
 * The rules for names, statuses and definitions are the schemas of src/domain/schemas.ts
 * (re-exported here for the modules that import them from this file). Kept free of I/O so
 * machines, runtime, config and HTTP can all import it.
 */
import { createHash } from "node:crypto"
import { Either, Schema } from "effect"
import type { ProtocolVersion } from "./protocol-versions.js"
import { normaliseTransport, parseErrorProblems, ServiceDefinition } from "./schemas.js"

export { STATUSES, agentIdProblem, serviceNameProblem, type ServiceDefinition, type Status } from "./schemas.js"

/** The transport actually used to reach a service. */
export type TransportType = "streamable_http" | "sse" | "stdio"

/** A definition resolved to what a connection needs. */
export type ResolvedDefinition =
  | {
      readonly kind: "remote"
      readonly transport: "streamable_http" | "sse"
      readonly url: string
      readonly headers: Readonly<Record<string, string>>
      /** The `roots` the store answers roots/list with; undefined: no roots capability. */
      readonly roots?: ReadonlyArray<string> | undefined
      readonly envFile?: string | undefined
      /** The protocol revision the definition pins; undefined: negotiated. */
      readonly protocolVersion?: ProtocolVersion | undefined
    }
  | {
      readonly kind: "local"
      readonly transport: "stdio"
      readonly command: string
      readonly args: ReadonlyArray<string>
      readonly env: Readonly<Record<string, string>>
      readonly cwd: string | undefined
      readonly roots?: ReadonlyArray<string> | undefined
      readonly envFile?: string | undefined
      readonly protocolVersion?: ProtocolVersion | undefined
    }

/** Which scope a service lives in: the store, or one agent. */
export type Scope = { readonly kind: "store" } | { readonly kind: "agent"; readonly agentId: string }
export const STORE_SCOPE: Scope = { kind: "store" }
export const agentScope = (agentId: string): Scope => ({ kind: "agent", agentId })
export const scopeLabel = (scope: Scope): string => (scope.kind === "store" ? "store" : scope.agentId)

const decodeDefinition = Schema.decodeUnknownEither(ServiceDefinition)

/** Resolutions by definition object: a definition is never changed in place (see `definitionHash`). */
const resolutions = new WeakMap<object, ResolvedDefinition>()

/**
 * Resolves a definition (checked with the domain's `ServiceDefinition` schema) to what a connection
 * needs: the transport given (or inferred from the URL: a path ending in `/sse` means SSE), and
 * the defaults. Throws a `DefinitionError` naming each problem of a definition that is not usable
 * (one read from a hand-edited services file: those from requests were decoded at the edge).
 */
export const resolveDefinition = (def: ServiceDefinition): ResolvedDefinition => {
  const known = resolutions.get(def)
  if (known !== undefined) return known
  const decoded = decodeDefinition(def, { errors: "all" })
  if (Either.isLeft(decoded)) throw new DefinitionError(parseErrorProblems(decoded.left))
  const resolved = resolveChecked(decoded.right)
  resolutions.set(def, resolved)
  return resolved
}

const resolveChecked = (def: ServiceDefinition): ResolvedDefinition => {
  const given = def.transport ?? def.type
  const transport = given === undefined ? undefined : normaliseTransport(given)
  if (def.url !== undefined) {
    // A URL with a `${VAR}` reference may not parse before it is expanded: its path is read from the text.
    const path = URL.canParse(def.url) ? new URL(def.url).pathname : def.url.replace(/[?#].*$/, "")
    const inferred = path.replace(/\/+$/, "").endsWith("/sse") ? "sse" : "streamable_http"
    return {
      kind: "remote",
      transport: transport === "streamable_http" || transport === "sse" ? transport : inferred,
      url: def.url,
      headers: def.headers ?? {},
      envFile: def.envFile,
      ...(def.roots !== undefined ? { roots: def.roots } : {}),
      ...(def.protocol_version !== undefined ? { protocolVersion: def.protocol_version } : {})
    }
  }
  return {
    kind: "local",
    transport: "stdio",
    command: def.command as string,
    args: def.args ?? [],
    env: def.env ?? {},
    cwd: def.cwd,
    envFile: def.envFile,
    ...(def.roots !== undefined ? { roots: def.roots } : {}),
    ...(def.protocol_version !== undefined ? { protocolVersion: def.protocol_version } : {})
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

/** `client_store_<name>_<8 hex>` or `client_<agent>_<name>_<8 hex>` (docs/api.md, Conventions). */
export const clientId = (scope: Scope, name: string, def: ServiceDefinition): string => {
  const hash = definitionHash(def)
  return scope.kind === "store" ? `client_store_${name}_${hash}` : `client_${scope.agentId}_${name}_${hash}`
}
