/**
 * Which era of MCP an upstream server speaks, as the spec's backward-compatibility rules tell it
 * (revision 2026-07-28, "Versioning" and the stdio and Streamable HTTP bindings) and as the SDK v2
 * client's `versionNegotiation: 'auto'` decides: probe with `server/discover`; a discovery result or
 * a recognised modern error (-32022 with its `supported` list) means a modern server, anything else
 * a 2025-era one (fall back to `initialize`), except what says nothing about the era (an outage, an
 * authorization wall, a 5xx): those fail the connect as before. Pure: src/mcp/connect.ts runs it.
 */
import { isModernVersion, LEGACY_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSION } from "../domain/protocol-versions.js"

/** The `_meta` keys of a modern request's envelope. */
export const PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
export const CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"
export const CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
/** The log level of a modern request: the server's log messages about it, at that level and above. */
export const LOG_LEVEL_META_KEY = "io.modelcontextprotocol/logLevel"
const SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"

/** UnsupportedProtocolVersion: the server does not speak the version asked (`data.supported` lists what it speaks). */
export const UNSUPPORTED_PROTOCOL_VERSION = -32022

/** What a `server/discover` result says of the server (kept to reconnect without asking again). */
export interface DiscoverFacts {
  readonly supportedVersions: ReadonlyArray<string>
  readonly capabilities: Readonly<Record<string, unknown>>
  readonly serverInfo: { readonly name: string; readonly version: string } | undefined
}

/**
 * The era a server was found to speak, remembered by the service's actor so that a reconnection
 * asks nothing again: modern (with its discovery, for zero round trips) or 2025 (`initialize`
 * straight away, no probe).
 */
export type EraVerdict =
  | { readonly kind: "modern"; readonly version: string; readonly discover: DiscoverFacts }
  | { readonly kind: "legacy"; readonly version: string }

/** How the probe ended, as the transport and the session saw it. */
export type ProbeOutcome =
  | { readonly kind: "result"; readonly result: unknown }
  | { readonly kind: "rpc_error"; readonly code: number; readonly message: string; readonly data?: unknown }
  /** An HTTP status without a JSON-RPC error the session could read (its body's start, when any). */
  | { readonly kind: "http_error"; readonly status: number; readonly body: string | undefined }
  /** No answer in time. */
  | { readonly kind: "timeout" }
  /** The connection closed (a stdio server that exits on a request before `initialize`). */
  | { readonly kind: "closed" }

/** What to do after the probe. */
export type ProbeVerdict =
  | { readonly kind: "modern"; readonly version: string; readonly discover: DiscoverFacts }
  | { readonly kind: "legacy" }
  /** A modern server that speaks no revision the store speaks: a permanent failure. */
  | { readonly kind: "mismatch"; readonly supported: ReadonlyArray<string> }
  /** Says nothing about the era (outage, 5xx, auth, a silent HTTP server): the connect fails as any other. */
  | { readonly kind: "inconclusive" }

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value)

/** A `server/discover` result's facts, or undefined when it is not one. */
export const discoverFacts = (result: unknown): DiscoverFacts | undefined => {
  if (!isRecord(result)) return undefined
  const versions = result["supportedVersions"]
  if (!Array.isArray(versions) || !versions.every((v) => typeof v === "string")) return undefined
  // Quoted in hints and kept with the service: bounded.
  const supportedVersions = versions.slice(0, 20).map((v: string) => v.slice(0, 40))
  const capabilities = isRecord(result["capabilities"]) ? result["capabilities"] : {}
  const info = isRecord(result["_meta"]) ? result["_meta"][SERVER_INFO_META_KEY] : undefined
  const serverInfo =
    isRecord(info) && typeof info["name"] === "string" ? { name: info["name"], version: typeof info["version"] === "string" ? info["version"] : "" } : undefined
  return { supportedVersions, capabilities, serverInfo }
}

/** The `supported` list of a -32022 error's data, when it has one (bounded: it is quoted in hints). */
export const supportedList = (data: unknown): ReadonlyArray<string> | undefined => {
  const supported = isRecord(data) ? data["supported"] : undefined
  if (!Array.isArray(supported) || supported.length === 0 || !supported.every((v) => typeof v === "string")) return undefined
  return supported.slice(0, 20).map((v: string) => v.slice(0, 40))
}

/** A JSON-RPC error in an HTTP error answer's body, if it holds one. */
const rpcErrorIn = (body: string | undefined): { code: number; message: string; data?: unknown } | undefined => {
  if (body === undefined || body === "") return undefined
  try {
    const parsed: unknown = JSON.parse(body)
    const error = isRecord(parsed) ? parsed["error"] : undefined
    if (!isRecord(error) || typeof error["code"] !== "number") return undefined
    return { code: error["code"], message: typeof error["message"] === "string" ? error["message"] : "", data: error["data"] }
  } catch {
    return undefined
  }
}

/**
 * The era a probe's outcome shows. `transport` decides a silence (a stdio server that does not
 * answer or exits is a 2025 one; an HTTP server that does not answer is down) as the spec says.
 */
export const classifyProbe = (outcome: ProbeOutcome, transport: "stdio" | "http"): ProbeVerdict => {
  switch (outcome.kind) {
    case "result": {
      const facts = discoverFacts(outcome.result)
      // Not a discovery result: not modern evidence.
      if (facts === undefined) return { kind: "legacy" }
      if (facts.supportedVersions.includes(MODERN_PROTOCOL_VERSION)) return { kind: "modern", version: MODERN_PROTOCOL_VERSION, discover: facts }
      // A modern server that speaks other revisions only: it may still answer initialize.
      return facts.supportedVersions.some((v) => !isModernVersion(v)) ? { kind: "legacy" } : { kind: "mismatch", supported: facts.supportedVersions }
    }
    case "rpc_error":
      return classifyRpcError(outcome.code, outcome.data)
    case "http_error": {
      // Not era evidence: an authorization wall, a server or gateway failure.
      if (outcome.status === 401 || outcome.status === 403 || outcome.status >= 500) return { kind: "inconclusive" }
      const error = rpcErrorIn(outcome.body)
      return error !== undefined ? classifyRpcError(error.code, error.data) : { kind: "legacy" }
    }
    case "timeout":
    case "closed":
      return transport === "stdio" ? { kind: "legacy" } : { kind: "inconclusive" }
  }
}

/** -32022 with a `supported` list is modern evidence; any other error is a 2025-era server's. */
const classifyRpcError = (code: number, data: unknown): ProbeVerdict => {
  if (code !== UNSUPPORTED_PROTOCOL_VERSION) return { kind: "legacy" }
  const supported = supportedList(data)
  if (supported === undefined) return { kind: "legacy" }
  // The probe asked for the one modern revision the store speaks: a list without it has none in common.
  if (supported.some((v) => isModernVersion(v))) return { kind: "mismatch", supported }
  return { kind: "legacy" }
}

/** The 2025-era revisions the store speaks, as a readable list. */
const LEGACY_LIST = LEGACY_PROTOCOL_VERSIONS.join(", ")

/**
 * The hint of a version mismatch, naming both sides: what the server speaks, what the store
 * offered (the pinned revision, if any) and what it speaks.
 */
export const mismatchHint = (serverSpeaks: ReadonlyArray<string>, pinned: string | undefined): string => {
  const server = serverSpeaks.length > 0 ? serverSpeaks.join(", ") : "an unknown revision"
  const common = serverSpeaks.filter((v) => v === MODERN_PROTOCOL_VERSION || (LEGACY_PROTOCOL_VERSIONS as ReadonlyArray<string>).includes(v))
  if (pinned !== undefined) {
    return common.length > 0
      ? `the server speaks MCP ${server}; the definition pins "protocol_version": "${pinned}": pin one of ${common.map((v) => `"${v}"`).join(", ")} or drop "protocol_version"`
      : `the server speaks MCP ${server}; the definition pins "protocol_version": "${pinned}", and mcp-store speaks ${MODERN_PROTOCOL_VERSION} and ${LEGACY_LIST}: no revision in common`
  }
  return `the server speaks MCP ${server}; mcp-store speaks ${MODERN_PROTOCOL_VERSION} and ${LEGACY_LIST}: no revision in common (update the server or mcp-store)`
}
