// Bad input to every endpoint of the route table, table-driven: the cases of each endpoint are
// derived from its method, path and schemas (test/support/routes.ts), so endpoints added later are
// covered without editing this file, and a test fails when an endpoint's input has no case. Every
// case must answer 4xx (never 5xx) with the contract's error body, and must not change any state:
// the services file's bytes, the data folder, the services of every scope and the agents.
import { readdirSync } from "node:fs"
import { Agent, request as httpRequest } from "node:http"
import { connect } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { routeTable } from "../../src/http/Api.js"
import {
  endpointSpecs,
  fillPath,
  fixtureService,
  rawRequest,
  startTestServer,
  type EndpointSpec,
  type Field,
  type JsonSchema,
  type TestServer
} from "../support/index.js"

/** Every error code of the contract (docs/api.md). */
const CONTRACT_CODES = [
  "VALIDATION_ERROR", "AMBIGUOUS_TOOL", "INVALID_ARGUMENTS", "UNAUTHORIZED", "NOT_FOUND", "SERVICE_NOT_FOUND",
  "TOOL_NOT_FOUND", "METHOD_NOT_ALLOWED", "WAIT_TIMEOUT", "PAYLOAD_TOO_LARGE", "UNSUPPORTED_MEDIA_TYPE",
  "INTERNAL_ERROR", "UPSTREAM_ERROR", "SERVICE_UNAVAILABLE", "TOOL_TIMEOUT", "RESOURCE_NOT_FOUND", "PROMPT_NOT_FOUND"
]
const METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH"]
const MIB = 1024 * 1024

const AGENT = "agent-1"
const STORE_SERVICE = "live"
const AGENT_SERVICE = "agent-only"
const UNKNOWN = "no-such-svc"
const DEAD_URL = "http://127.0.0.1:9/mcp"
const LONG = "x".repeat(10_000)
/** A JSON body over the 1 MiB limit, made and encoded once (every endpoint that takes a body gets it). */
const OVERSIZED_BODY = Buffer.from(JSON.stringify({ padding: "x".repeat(MIB + 16) }))

/** What a case must answer. */
type Expect =
  /** A contract error with one of these statuses and codes; `field` must be among details.fields. */
  | { readonly kind: "error"; readonly status: ReadonlyArray<number>; readonly codes: ReadonlyArray<string>; readonly field?: string; readonly allowed?: ReadonlyArray<string> }
  /** 200 with success true (junk the endpoint ignores). */
  | { readonly kind: "ok" }
  /** A legal value for a filter: 200, or a contract 4xx; never 5xx. */
  | { readonly kind: "any" }

interface Case {
  readonly label: string
  /** Which input the case is about (the coverage check counts these). */
  readonly part: string
  readonly method: string
  /** Path and query, already encoded. */
  readonly url: string
  readonly body?: string | Buffer | undefined
  readonly headers?: Readonly<Record<string, string>>
  readonly expect: Expect
}

const invalid = (field?: string): Expect => ({ kind: "error", status: [400], codes: ["VALIDATION_ERROR"], ...(field !== undefined ? { field } : {}) })
const serviceNotFound: Expect = { kind: "error", status: [404], codes: ["SERVICE_NOT_FOUND"] }
const toolNotFound: Expect = { kind: "error", status: [404], codes: ["TOOL_NOT_FOUND"] }
/** An asynchronous call's id of the right shape that names no call (of this scope and key). */
const UNKNOWN_CALL = `call_${"A".repeat(32)}`
const callNotFound: Expect = { kind: "error", status: [404], codes: ["NOT_FOUND"] }
/** An approval's id of the right shape that names no pending approval. */
const UNKNOWN_APPROVAL = `apr_${"A".repeat(22)}`
/** A strange name: refused as malformed, or simply not found. */
const strangeName = (notFound: string): Expect => ({ kind: "error", status: [400, 404], codes: ["VALIDATION_ERROR", notFound] })

const isAgentRoute = (spec: EndpointSpec) => spec.path.startsWith("/for_agent/")
/** Endpoints whose name fields filter history rather than name a live service. */
const isFilter = (spec: EndpointSpec) => spec.path.startsWith("/monitoring/") || spec.path.endsWith("/tool_records")
const SERVICE_REFS = new Set(["name", "service_name", "client_id_or_service_name"])
const existingName = (spec: EndpointSpec) => (isAgentRoute(spec) ? AGENT_SERVICE : STORE_SERVICE)
const otherScopeName = (spec: EndpointSpec) => (isAgentRoute(spec) ? STORE_SERVICE : AGENT_SERVICE)
const hasBody = (method: string) => method === "POST" || method === "PUT" || method === "PATCH"

/** Strange names, decoded (the value a field carries). */
const STRANGE_NAMES: ReadonlyArray<[string, string]> = [
  ["../x", "dot-dot-slash"],
  ["a__b", "double underscore"],
  ["\u0000", "NUL"],
  ["%00", "percent-zero text"],
  ["serviço-☃-名前", "unicode"],
  ["a b", "space"]
]
/** Strange path segments, already encoded as they travel. */
const STRANGE_SEGMENTS: ReadonlyArray<[string, string]> = [
  ["..%2Fx", "../x"],
  ["a__b", "a__b"],
  [LONG, "10,000 characters"],
  ["%00", "%00"],
  ["%E2%98%83", "unicode"],
  ["%ff", "invalid UTF-8 escape"],
  ["a%20b", "space"]
]
const BAD_AGENT_IDS: ReadonlyArray<[string, string]> = [
  ["bad%20id", "bad id"],
  ["a".repeat(101), "101 characters"],
  ["a.b", "dot"],
  ["%E2%98%83", "unicode"],
  ["a%2Fb", "a/b"],
  ["%ff", "invalid UTF-8 escape"]
]
/**
 * Bodies the body checks refuse before routing, by the same rule on every route: each endpoint gets
 * one of each list, in turn (`makeCases`), and the coverage test checks that every one is sent.
 */
const MALFORMED_BODIES = ["{bad json", '{"a": 1,}', "\u0000"]
const OTHER_TYPES = ["text/plain", "multipart/form-data; boundary=x"]
const SCALAR_BODIES: ReadonlyArray<[string, string]> = [
  ["a string", '"text"'],
  ["a number", "42"],
  ["true", "true"]
]
const BAD_AGENT_VALUES = ["bad id", "a".repeat(101), "a.b", "☃", "a/b", ""]

const typeOf = (s: JsonSchema): string | undefined =>
  s.enum !== undefined ? "enum" : s.type !== undefined ? s.type : s.anyOf !== undefined || s.oneOf !== undefined ? "union" : undefined
const jsonTypeOf = (v: unknown) => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v === "number" ? "number" : typeof v)
const unionTypes = (s: JsonSchema) => (s.anyOf ?? s.oneOf ?? []).map((m) => (m.type === "integer" ? "number" : (m.type ?? "unknown")))

/** A valid value for a field (the unchanged siblings of the field a case breaks). */
const validValue = (field: Field, spec: EndpointSpec): unknown => {
  const s = field.schema
  if (SERVICE_REFS.has(field.name)) return UNKNOWN
  if (field.name === "tool_name") return "no_such_tool"
  if (field.name === "agent_id") return AGENT
  const t = typeOf(s)
  if (t === "enum") return s.enum![0]
  if (t === "integer" || t === "number") return s.minimum ?? (s.exclusiveMinimum !== undefined ? s.exclusiveMinimum + 1 : 1)
  if (t === "boolean") return false
  if (t === "string") return /url|endpoint/.test(field.name) ? "http://127.0.0.1:9/" : "x"
  if (t === "array") return s.items !== undefined ? [validValue({ name: field.name, required: true, schema: s.items }, spec)] : []
  if (t === "union") {
    const member = (s.anyOf ?? s.oneOf ?? []).find((m) => m.type !== "null")
    return member ? validValue({ ...field, schema: member }, spec) : null
  }
  if (t === "object") return {}
  return null
}

/**
 * Hand-written bodies: a valid one and bad ones, for payloads whose rules their JSON Schema cannot
 * carry (add_service's three forms, decoded by shape; one of url and command; a name that must be
 * the path's). Used besides the cases derived from the schema, and as the base of those cases.
 */
const OPAQUE: Record<string, { valid: (spec: EndpointSpec) => unknown; bad: (spec: EndpointSpec) => ReadonlyArray<[string, unknown, string]> }> = {
  addService: {
    valid: () => ({ name: "probe-svc", url: DEAD_URL }),
    bad: (spec) => [
      ["null", null, "body"],
      ["empty array", [], "body"],
      ["a string", "just a string", "body"],
      ["a number", 42, "body"],
      ["empty object", {}, "name"],
      ["name ../x", { name: "../x", url: DEAD_URL }, "name"],
      ["name a__b", { name: "a__b", url: DEAD_URL }, "name"],
      ["name of 10,000 characters", { name: LONG, url: DEAD_URL }, "name"],
      ["name NUL", { name: "\u0000", url: DEAD_URL }, "name"],
      ["name %00", { name: "%00", url: DEAD_URL }, "name"],
      ["unicode name", { name: "☃", url: DEAD_URL }, "name"],
      ["name with _byagent_", { name: "x_byagent_y", url: DEAD_URL }, "name"],
      ["empty name", { name: "", url: DEAD_URL }, "name"],
      ["numeric name", { name: 5, url: DEAD_URL }, "name"],
      ["no url nor command", { name: "ok-name" }, "url"],
      ["numeric url", { name: "ok-name", url: 5 }, "url"],
      ["ftp url", { name: "ok-name", url: "ftp://127.0.0.1/mcp" }, "url"],
      ["url that is not a URL", { name: "ok-name", url: "not a url" }, "url"],
      ["url and command", { name: "ok-name", url: DEAD_URL, command: "node" }, "url"],
      ["numeric command", { name: "ok-name", command: 5 }, "command"],
      ["args as a string", { name: "ok-name", command: "node", args: "a b" }, "args"],
      ["args of numbers", { name: "ok-name", command: "node", args: [1, 2] }, "args"],
      ["env value a number", { name: "ok-name", command: "node", env: { A: 1 } }, "env"],
      ["header value a number", { name: "ok-name", url: DEAD_URL, headers: { h: 5 } }, "headers"],
      ["unknown transport", { name: "ok-name", url: DEAD_URL, transport: "carrier-pigeon" }, "transport"],
      ["mcpServers an array", { mcpServers: [] }, "mcpServers"],
      ["mcpServers a string", { mcpServers: "x" }, "mcpServers"],
      ["mcpServers empty", { mcpServers: {} }, "body"],
      ["mcpServers with a bad name", { mcpServers: { a__b: { url: DEAD_URL } } }, "mcpServers.a__b.name"],
      ["mcpServers entry an array", { mcpServers: { "ok-name": [] } }, "mcpServers.ok-name"],
      ["one bad entry of two", [{ name: "ok-name", url: DEAD_URL }, { name: "../bad", url: DEAD_URL }], "[1].name"],
      ["array of null", [null], "[0]"],
      ["array of arrays", [[]], "[0]"],
      ["the same name twice", [{ name: "dup", url: DEAD_URL }, { name: "dup", url: DEAD_URL }], "name"],
      ["existing service, broken definition", { name: existingName(spec), command: 5 }, "command"],
      ["existing service, url and command", { name: existingName(spec), url: DEAD_URL, command: "node" }, "url"]
    ]
  },
  updateService: {
    valid: () => ({ url: DEAD_URL }),
    bad: () => [
      ["null", null, "body"],
      ["empty array", [], "body"],
      ["array of a definition", [{ url: DEAD_URL }], "body"],
      ["a string", "just a string", "body"],
      ["a number", 42, "body"],
      ["empty object", {}, "url"],
      ["numeric url", { url: 5 }, "url"],
      ["ftp url", { url: "ftp://127.0.0.1/mcp" }, "url"],
      ["url and command", { url: DEAD_URL, command: "node" }, "url"],
      ["numeric command", { command: 5 }, "command"],
      ["args as a string", { command: "node", args: "a b" }, "args"],
      ["env value a number", { command: "node", env: { A: 1 } }, "env"],
      ["headers an array", { url: DEAD_URL, headers: [] }, "headers"],
      ["unknown transport", { url: DEAD_URL, transport: "carrier-pigeon" }, "transport"],
      ["another name", { name: "other", url: DEAD_URL }, "name"],
      ["name ../x", { name: "../x", url: DEAD_URL }, "name"],
      ["numeric name", { name: 5, url: DEAD_URL }, "name"]
    ]
  }
}

/** The valid base of a request: path values, query and body (required fields only). */
const baseOf = (spec: EndpointSpec) => {
  const pathValues: Record<string, string> = {}
  for (const p of spec.pathParams) {
    if (p === "agent_id") pathValues[p] = AGENT
    else if (p === "call_id") pathValues[p] = UNKNOWN_CALL
    else if (p === "approval_id") pathValues[p] = UNKNOWN_APPROVAL
    // A body describes the named service (update_service): name an existing one so the body is judged.
    else pathValues[p] = hasBody(spec.method) ? existingName(spec) : UNKNOWN
  }
  const query: Record<string, string> = {}
  for (const f of spec.query) if (f.required) query[f.name] = String(validValue(f, spec))
  let body: string | undefined
  if (spec.payload.kind === "object") {
    const value: Record<string, unknown> = { ...(OPAQUE[spec.name]?.valid(spec) as Record<string, unknown> | undefined) }
    for (const f of spec.payload.fields) if (f.required) value[f.name] = validValue(f, spec)
    body = spec.payload.nullable && Object.keys(value).length === 0 ? undefined : JSON.stringify(value)
  } else if (spec.payload.kind === "opaque") {
    const opaque = OPAQUE[spec.name]
    body = opaque ? JSON.stringify(opaque.valid(spec)) : undefined
  }
  return { pathValues, query, body }
}

const queryString = (query: Readonly<Record<string, string>>, raw = "") => {
  const parts = Object.entries(query).map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
  if (raw !== "") parts.push(raw)
  return parts.length > 0 ? `?${parts.join("&")}` : ""
}

/** The methods the route table allows on a concrete path. */
const allowedOn = (concrete: string): string[] => {
  const out = new Set<string>()
  for (const r of routeTable()) {
    const pattern = new RegExp(`^${r.path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/:[A-Za-z_]+/g, "[^/]+")}$`)
    if (pattern.test(concrete)) out.add(r.method)
  }
  return [...out].sort()
}

/** Bad values of a query parameter (as raw, encoded text) with what each must answer. */
const badQueryValues = (field: Field, spec: EndpointSpec): Array<[string, string, Expect]> => {
  const s = field.schema
  const t = typeOf(s)
  const out: Array<[string, string, Expect]> = []
  const enc = encodeURIComponent
  const bad = (label: string, raw: string) => out.push([label, raw, invalid(field.name)])
  if (t === "integer" || t === "number") {
    for (const v of ["abc", "", "1e400", "-1"]) bad(`'${v}'`, enc(v))
    if (s.minimum !== undefined && s.minimum - 1 !== -1) bad(`minimum - 1`, String(s.minimum - 1))
    if (s.exclusiveMinimum !== undefined) bad(`exclusive minimum`, String(s.exclusiveMinimum))
    if (s.maximum !== undefined) {
      bad(`maximum + 1`, String(s.maximum + 1))
      bad("huge", "99999999999999999999999")
    }
    if (t === "integer") bad("fraction", "1.5")
    const named: Record<string, string[]> = { limit: ["100000", "0", "-1"], offset: ["-5"], wait: ["31", "-1"], days: ["0", "-1"] }
    for (const v of named[field.name] ?? []) bad(`${field.name}=${v}`, v)
    out.push(["given twice", `1&${enc(field.name)}=2`, invalid(field.name)])
  } else if (t === "boolean") {
    for (const v of ["maybe", "2", ""]) bad(`'${v}'`, enc(v))
  } else if (t === "enum") {
    for (const v of ["junk", "", String(s.enum![0]).toUpperCase()]) if (!s.enum!.includes(v)) bad(`'${v}'`, enc(v))
    out.push(["given twice", `${enc(String(s.enum![0]))}&${enc(field.name)}=${enc(String(s.enum![0]))}`, invalid(field.name)])
  } else if (t === "string") {
    if (s.maxLength !== undefined) bad("over maxLength", "x".repeat(Math.max(s.maxLength + 1, s.maxLength < 10_000 ? 10_000 : 0)))
    if ((s.minLength ?? 0) >= 1) bad("empty", "")
    if (s.pattern !== undefined || field.name === "agent_id") {
      const re = s.pattern !== undefined ? new RegExp(s.pattern) : /^[A-Za-z0-9_-]{1,100}$/
      for (const v of BAD_AGENT_VALUES) if (!re.test(v)) bad(`'${v.slice(0, 12)}' (${v.length} chars)`, enc(v))
    }
    if (field.name === "since") for (const v of ["junk", "2024-13-45T99:99:99Z"]) bad(`'${v}'`, enc(v))
    const filter = isFilter(spec)
    if (SERVICE_REFS.has(field.name)) {
      out.push(["unknown service", enc(UNKNOWN), filter ? { kind: "any" } : serviceNotFound])
      out.push(["a service of another scope", enc(otherScopeName(spec)), filter ? { kind: "any" } : serviceNotFound])
      for (const [v, label] of STRANGE_NAMES) out.push([`strange name: ${label}`, enc(v), filter ? { kind: "any" } : strangeName("SERVICE_NOT_FOUND")])
      out.push(["strange name: invalid UTF-8 escape", "%ff", filter ? { kind: "any" } : strangeName("SERVICE_NOT_FOUND")])
    }
    if (field.name === "tool_name") {
      out.push(["unknown tool", enc("no_such_tool"), filter ? { kind: "any" } : toolNotFound])
      for (const [v, label] of STRANGE_NAMES) out.push([`strange name: ${label}`, enc(v), filter ? { kind: "any" } : strangeName("TOOL_NOT_FOUND")])
    }
  }
  return out
}

/** Bad JSON values of a body field with what each must answer. */
const badFieldValues = (field: Field, spec: EndpointSpec): Array<[string, string, Expect]> => {
  const s = field.schema
  const t = typeOf(s)
  const out: Array<[string, string, Expect]> = []
  const bad = (label: string, value: unknown) => out.push([label, JSON.stringify(value), invalid(field.name)])
  const wrongTypes = (keep: ReadonlyArray<string>) => {
    for (const v of [42, "text", true, null, {}, [{}]]) if (!keep.includes(jsonTypeOf(v))) bad(`${jsonTypeOf(v)} ${JSON.stringify(v)}`, v)
  }
  if (t === "string") {
    wrongTypes(["string"])
    if (s.maxLength !== undefined) bad("over maxLength", "x".repeat(Math.max(s.maxLength + 1, s.maxLength < 10_000 ? 10_000 : 0)))
    if ((s.minLength ?? 0) >= 1) bad("empty", "")
    if (s.pattern !== undefined) for (const v of BAD_AGENT_VALUES) if (!new RegExp(s.pattern).test(v)) bad(`'${v.slice(0, 12)}'`, v)
    const filter = isFilter(spec)
    if (spec.name === "updateService" && field.name === "name") {
      // Not a lookup: the name of the service the path names, or left out.
      out.push(["another service's name", JSON.stringify(otherScopeName(spec)), invalid(field.name)])
    } else if (spec.name === "getPrompt" && field.name === "name") {
      // A prompt's callable name (<service>__<prompt>), not a service's.
      out.push(["unknown prompt", JSON.stringify(UNKNOWN), { kind: "error", status: [404], codes: ["PROMPT_NOT_FOUND"] }])
      for (const [v, label] of STRANGE_NAMES) out.push([`strange name: ${label}`, JSON.stringify(v), strangeName("PROMPT_NOT_FOUND")])
    } else if (SERVICE_REFS.has(field.name)) {
      out.push(["unknown service", JSON.stringify(UNKNOWN), filter ? { kind: "any" } : serviceNotFound])
      out.push(["a service of another scope", JSON.stringify(otherScopeName(spec)), filter ? { kind: "any" } : serviceNotFound])
      for (const [v, label] of STRANGE_NAMES) out.push([`strange name: ${label}`, JSON.stringify(v), filter ? { kind: "any" } : strangeName("SERVICE_NOT_FOUND")])
    }
    if (field.name === "tool_name") {
      out.push(["unknown tool", JSON.stringify("no_such_tool"), filter ? { kind: "any" } : toolNotFound])
      for (const [v, label] of STRANGE_NAMES) out.push([`strange name: ${label}`, JSON.stringify(v), filter ? { kind: "any" } : strangeName("TOOL_NOT_FOUND")])
    }
  } else if (t === "integer" || t === "number") {
    wrongTypes(["number"])
    bad("numeric string", "5")
    const min = s.minimum ?? s.exclusiveMinimum
    if (min !== undefined) {
      if (s.minimum !== undefined) bad("minimum - 1", s.minimum - 1)
      else bad("exclusive minimum", s.exclusiveMinimum)
      if (min >= 0) bad("negative", -1)
      bad("hugely negative", -1e308)
    }
    if (s.maximum !== undefined) {
      bad("maximum + 1", s.maximum + 1)
      bad("huge", 1e308)
      out.push(["1e400 (Infinity)", "1e400", invalid(field.name)])
    }
    if (t === "integer") bad("fraction", 1.5)
  } else if (t === "boolean") {
    wrongTypes(["boolean"])
    bad("'true' as text", "true")
  } else if (t === "enum") {
    wrongTypes([])
    bad("junk", "junk")
  } else if (t === "object") {
    wrongTypes(["object"])
  } else if (t === "array") {
    wrongTypes(["array"])
    const item = s.items !== undefined ? validValue({ name: field.name, required: true, schema: s.items }, spec) : "x"
    if (s.maxItems !== undefined) bad("over maxItems", Array.from({ length: s.maxItems + 1 }, () => item))
    if ((s.minItems ?? 0) >= 1) bad("empty", [])
    if (s.items !== undefined) {
      const itemTypes = typeOf(s.items) === "union" ? unionTypes(s.items) : [s.items.type === "integer" ? "number" : (s.items.type ?? "unknown")]
      for (const v of [42, null, [], true]) if (!itemTypes.includes(jsonTypeOf(v))) bad(`an item ${JSON.stringify(v)}`, [v])
    }
  } else if (t === "union") {
    wrongTypes(unionTypes(s))
  }
  // A status value, or a non-empty array of them.
  if (field.name === "status") for (const v of ["junk", [], ["healthy", "junk"]]) bad(`status ${JSON.stringify(v)}`, v)
  return out
}

/** Every case of one endpoint, and the inputs for which no case could be derived (made once per endpoint). */
const casesFor = (spec: EndpointSpec): { cases: Case[]; uncovered: string[] } => {
  let made = madeCases.get(spec)
  if (made === undefined) madeCases.set(spec, (made = makeCases(spec)))
  return made
}
const madeCases = new Map<EndpointSpec, { cases: Case[]; uncovered: string[] }>()

const makeCases = (spec: EndpointSpec): { cases: Case[]; uncovered: string[] } => {
  const cases: Case[] = []
  const uncovered: string[] = []
  const base = baseOf(spec)
  const json = { "content-type": "application/json" }
  const basePath = fillPath(spec.path, base.pathValues)
  const baseUrl = basePath + queryString(base.query)
  /** The requests already made for this endpoint: a case that would send one again (two rules can derive the same one) is left out. */
  const made = new Set<string>()
  const add = (c: Omit<Case, "method"> & { method?: string }) => {
    const full: Case = { method: spec.method, ...c }
    const body = typeof full.body === "string" ? full.body : full.body === undefined ? "-" : `${full.body.length} bytes`
    const key = `${full.part} ${full.method} ${full.url} ${JSON.stringify(full.headers ?? {})} ${body}`
    if (made.has(key)) return
    made.add(key)
    cases.push(full)
  }
  const withBody = (body: string | undefined) => (body !== undefined ? { body, headers: json } : {})
  /**
   * Which of several variants this endpoint gets, for inputs the body checks refuse before routing,
   * alike for every route (content type, malformed JSON, a body that is not an object): each
   * endpoint gets one variant of each (so each is shown to sit behind the checks), and the variants
   * go round the endpoints (so each variant is sent, to several endpoints).
   */
  const inTurn = <T>(variants: ReadonlyArray<T>, among: (s: EndpointSpec) => boolean): T => variants[specs.filter(among).indexOf(spec) % variants.length]!

  // Every wrong method on this path (405 naming the allowed ones). The router decides them by method
  // and path alone: sent once per path, by the path-wide test below, for all endpoints of that path.
  const allowed = allowedOn(basePath)
  for (const method of METHODS.filter((m) => !allowed.includes(m))) {
    add({
      label: `wrong method ${method}`,
      part: "method",
      method,
      url: basePath,
      ...(hasBody(method) ? { body: "{}", headers: json } : {}),
      expect: { kind: "error", status: [405], codes: ["METHOD_NOT_ALLOWED"], allowed }
    })
  }

  // Path parameters.
  for (const p of spec.pathParams) {
    const values: Array<[string, string, Expect]> =
      p === "agent_id"
        ? BAD_AGENT_IDS.map(([raw, label]) => [`agent_id ${label}`, raw, invalid("agent_id")])
        : p === "service_name"
          ? [
              ["unknown service", encodeURIComponent(UNKNOWN), serviceNotFound],
              ["a service of another scope", encodeURIComponent(otherScopeName(spec)), serviceNotFound],
              ...STRANGE_SEGMENTS.map(([raw, label]): [string, string, Expect] => [`strange name: ${label}`, raw, strangeName("SERVICE_NOT_FOUND")])
            ]
          : p === "call_id"
            ? [
                ["unknown call", UNKNOWN_CALL.replace(/A$/, "B"), callNotFound],
                ["too short", "call_abc", invalid("call_id")],
                ["no prefix", "A".repeat(37), invalid("call_id")],
                ["a character outside the id's alphabet", encodeURIComponent(`call_${"A".repeat(31)}.`), invalid("call_id")],
                ...STRANGE_SEGMENTS.map(([raw, label]): [string, string, Expect] => [`strange id: ${label}`, raw, invalid("call_id")])
              ]
            : p === "approval_id"
              ? [
                  ["unknown approval", UNKNOWN_APPROVAL.replace(/A$/, "B"), callNotFound],
                  ["too short", "apr_abc", invalid("approval_id")],
                  ["no prefix", "A".repeat(26), invalid("approval_id")],
                  ["a character outside the id's alphabet", encodeURIComponent(`apr_${"A".repeat(21)}.`), invalid("approval_id")],
                  ...STRANGE_SEGMENTS.map(([raw, label]): [string, string, Expect] => [`strange id: ${label}`, raw, invalid("approval_id")])
                ]
              : []
    if (values.length === 0) uncovered.push(`path parameter ${p}`)
    for (const [label, raw, expect] of values) {
      const url = fillPath(spec.path, { ...base.pathValues, [p]: raw }, [p]) + queryString(base.query)
      add({ label: `path ${label}`, part: `path:${p}`, url, ...withBody(base.body), expect })
    }
  }

  // Query parameters: missing when required, and bad values one at a time.
  for (const f of spec.query) {
    const values = badQueryValues(f, spec)
    if (f.required) {
      const { [f.name]: _, ...rest } = base.query
      add({ label: `query ${f.name} missing`, part: `query:${f.name}`, url: basePath + queryString(rest), ...withBody(base.body), expect: invalid(f.name) })
    } else if (values.length === 0) {
      uncovered.push(`query parameter ${f.name}`)
    }
    for (const [label, raw, expect] of values) {
      const { [f.name]: _, ...rest } = base.query
      const url = basePath + queryString(rest, `${encodeURIComponent(f.name)}=${raw}`)
      add({ label: `query ${f.name}: ${label}`, part: `query:${f.name}`, url, ...withBody(base.body), expect })
    }
  }

  // The body.
  if (spec.payload.kind === "object") {
    const payload = spec.payload
    const baseValue = base.body !== undefined ? (JSON.parse(base.body) as Record<string, unknown>) : {}
    // An array is refused before routing where the route takes none (a rule by path: every endpoint
    // gets both); a scalar is refused before routing alike on every route (one each, in turn).
    const wholeBodies: Array<[string, string]> = [
      ["an empty array", "[]"],
      ["an array of the valid body", `[${JSON.stringify(baseValue)}]`],
      inTurn(SCALAR_BODIES, (s) => s.payload.kind === "object")
    ]
    if (!payload.nullable) wholeBodies.push(["null", "null"])
    for (const [label, body] of wholeBodies) add({ label: `body ${label}`, part: "body", url: baseUrl, body, headers: json, expect: invalid("body") })
    if (!payload.nullable && payload.fields.some((f) => f.required)) {
      add({ label: "no body at all", part: "body", url: baseUrl, expect: invalid() })
    }
    for (const f of payload.fields) {
      if (f.required) {
        const { [f.name]: _, ...rest } = baseValue
        add({ label: `body ${f.name} missing`, part: `body:${f.name}`, url: baseUrl, body: JSON.stringify(rest), headers: json, expect: invalid(f.name) })
      }
      const values = badFieldValues(f, spec)
      if (values.length === 0 && !f.required) uncovered.push(`body field ${f.name}`)
      for (const [label, value, expect] of values) {
        const { [f.name]: _, ...rest } = baseValue
        const body = `${JSON.stringify(rest).slice(0, -1)}${Object.keys(rest).length > 0 ? "," : ""}${JSON.stringify(f.name)}:${value}}`
        add({ label: `body ${f.name}: ${label}`, part: `body:${f.name}`, url: baseUrl, body, headers: json, expect })
      }
    }
    for (const [label, value, field] of OPAQUE[spec.name]?.bad(spec) ?? []) {
      add({ label: `body ${label}`, part: "body", url: baseUrl, body: JSON.stringify(value), headers: json, expect: invalid(field) })
    }
  } else if (spec.payload.kind === "opaque") {
    const opaque = OPAQUE[spec.name]
    if (opaque === undefined) uncovered.push(`body (no hand-written cases for ${spec.group}.${spec.name}: add them to OPAQUE)`)
    for (const [label, value, field] of opaque?.bad(spec) ?? []) {
      add({ label: `body ${label}`, part: "body", url: baseUrl, body: JSON.stringify(value), headers: json, expect: invalid(field) })
    }
  }

  // What travels with any body: malformed JSON, another content type, a body over 1 MiB.
  if (hasBody(spec.method)) {
    const valid = base.body ?? "{}"
    for (const body of [inTurn(MALFORMED_BODIES, (s) => hasBody(s.method))]) {
      add({ label: `malformed JSON ${JSON.stringify(body)}`, part: "transport", url: baseUrl, body, headers: json, expect: invalid("body") })
    }
    for (const type of [inTurn(OTHER_TYPES, (s) => hasBody(s.method))]) {
      add({
        label: `content type ${type}`,
        part: "transport",
        url: baseUrl,
        body: valid,
        headers: { "content-type": type },
        expect: { kind: "error", status: [415], codes: ["UNSUPPORTED_MEDIA_TYPE"] }
      })
    }
    const big = OVERSIZED_BODY
    add({
      label: "body over 1 MiB",
      part: "transport",
      url: baseUrl,
      body: big,
      headers: { "content-type": "application/json", "content-length": String(big.length) },
      expect: { kind: "error", status: [413], codes: ["PAYLOAD_TOO_LARGE"] }
    })
  }

  // An endpoint without input: junk in the query must not break it.
  if (spec.pathParams.length === 0 && spec.query.length === 0 && spec.payload.kind === "none") {
    if (spec.method === "GET") {
      const junk = `junk=1&limit=-1&offset=-5&wait=31&days=0&%00=%ff&a%5Bb%5D=c&__proto__=1&x=${"y".repeat(10_000)}&name=..%2Fx&&=&`
      add({ label: "query junk", part: "query-junk", url: `${basePath}?${junk}`, expect: { kind: "ok" } })
    }
  }
  return { cases, uncovered }
}

/** Why a reply does not meet the case, or undefined when it does. */
const judge = (c: Case, status: number, text: string, contentType: string): string | undefined => {
  if (status >= 500) return `answered ${status} (never 5xx for bad input): ${text.slice(0, 300)}`
  let body: any
  try {
    body = JSON.parse(text)
  } catch {
    return `answered ${status} with a body that is not JSON: ${text.slice(0, 200)}`
  }
  if (c.expect.kind === "ok") return status === 200 && body.success === true ? undefined : `expected 200 success, got ${status}: ${text.slice(0, 300)}`
  if (c.expect.kind === "any" && status < 400) return undefined
  if (c.expect.kind === "error" && !c.expect.status.includes(status)) {
    return `expected ${c.expect.status.join("/")} ${c.expect.codes.join("/")}, got ${status}: ${text.slice(0, 300)}`
  }
  if (status < 400) return `expected 4xx, got ${status}: ${text.slice(0, 300)}`
  if (!/application\/json/.test(contentType)) return `content-type ${contentType}`
  const problems: string[] = []
  if (JSON.stringify(Object.keys(body).sort()) !== JSON.stringify(["error", "message", "success"])) problems.push(`top-level keys ${Object.keys(body)}`)
  if (body.success !== false) problems.push("success is not false")
  if (typeof body.message !== "string" || body.message.length === 0) problems.push("message is not a non-empty string")
  const e = body.error
  if (typeof e !== "object" || e === null) return `${problems.join("; ")}; error is not an object`
  if (JSON.stringify(Object.keys(e).sort()) !== JSON.stringify(["code", "details", "message"])) problems.push(`error keys ${Object.keys(e)}`)
  if (!CONTRACT_CODES.includes(e.code)) problems.push(`code ${e.code} is not in the contract`)
  if (c.expect.kind === "error" && !c.expect.codes.includes(e.code)) problems.push(`code ${e.code}, expected ${c.expect.codes.join("/")}`)
  if (e.message !== body.message) problems.push("error.message differs from message")
  if (typeof e.details !== "object" || e.details === null || Array.isArray(e.details)) problems.push("details is not an object")
  if (e.code === "VALIDATION_ERROR") {
    const fields = e.details?.fields
    if (!Array.isArray(fields) || fields.length === 0) problems.push("VALIDATION_ERROR without details.fields")
    else if (fields.some((f: any) => typeof f?.field !== "string" || typeof f?.problem !== "string")) problems.push("a details.fields entry is not {field, problem}")
    else if (c.expect.kind === "error" && c.expect.field !== undefined && !fields.some((f: { field: string }) => f.field.includes(c.expect.kind === "error" ? c.expect.field! : ""))) {
      problems.push(`details.fields ${JSON.stringify(fields.map((f: { field: string }) => f.field))} does not name '${c.expect.field}'`)
    }
  }
  if (c.expect.kind === "error" && c.expect.allowed !== undefined) {
    const allowed = Array.isArray(e.details?.allowed) ? [...e.details.allowed].sort() : e.details?.allowed
    if (JSON.stringify(allowed) !== JSON.stringify(c.expect.allowed)) problems.push(`details.allowed ${JSON.stringify(allowed)}, expected ${JSON.stringify(c.expect.allowed)}`)
  }
  return problems.length > 0 ? `${status}: ${problems.join("; ")} — ${text.slice(0, 200)}` : undefined
}

const specs = await endpointSpecs()

/**
 * The cases' client: node:http on one kept-alive connection, the cases sent one after another.
 * fetch (the support client's) took several times the CPU per request for the same bytes on the
 * wire: the same method, target (as fetch reads the URL), headers and body, framed by
 * Content-Length as fetch frames it (a POST or PUT without a body sends Content-Length: 0).
 */
const caseAgent = new Agent({ keepAlive: true, maxSockets: 1 })
const sendCase = (base: string, method: string, url: string, body: string | undefined, headers: Readonly<Record<string, string>>): Promise<{ status: number; text: string; contentType: string }> => {
  const target = new URL(base + url)
  const framed: Record<string, string> = { ...headers }
  if (body !== undefined) framed["content-length"] = String(Buffer.byteLength(body))
  else if (method === "POST" || method === "PUT") framed["content-length"] = "0"
  const attempt = (retried: boolean): Promise<{ status: number; text: string; contentType: string }> =>
    new Promise((resolve, reject) => {
      const req = httpRequest(
        { host: target.hostname, port: target.port, path: target.pathname + target.search, method, headers: framed, agent: caseAgent },
        (res) => {
          const chunks: Buffer[] = []
          res.on("data", (c: Buffer) => chunks.push(c))
          res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8"), contentType: res.headers["content-type"] ?? "" }))
          res.on("error", reject)
        }
      )
      req.setTimeout(40_000, () => req.destroy(new Error(`${method} ${url.slice(0, 100)} timed out`)))
      req.on("error", (e: NodeJS.ErrnoException) => {
        // A kept-alive connection the server closed as the request went out (nothing was read): once more, on a new one.
        if (!retried && req.reusedSocket && e.code === "ECONNRESET") attempt(true).then(resolve, reject)
        else reject(e)
      })
      req.end(body)
    })
  return attempt(false)
}

describe("bad input to every endpoint of the route table", () => {
  let server: TestServer
  let initial: string

  const stable = (services: ReadonlyArray<Record<string, unknown>>) =>
    services.map((s) => [s.scope, s.name, s.client_id, s.status, s.tool_count, s.url, s.command, JSON.stringify(s.args), s.transport_type].join(" ")).sort()

  /**
   * Everything bad input must leave as it was, as the API answers it: the services file's bytes,
   * the data folder, list_services of every scope and the agents.
   */
  const state = async (): Promise<string> => {
    const get = async (path: string) => {
      const reply = await sendCase(server.url, "GET", path, undefined, {})
      return { status: reply.status, body: JSON.parse(reply.text) }
    }
    const services = await get("/for_store/list_services?scope=all")
    const agents = await get("/for_store/list_all_agents")
    return JSON.stringify({
      file: server.readFileText(),
      folder: readdirSync(server.dir).sort(),
      services: [services.status, services.body.total_services, services.body.total_tools, ...stable(services.body.services)],
      agents: (agents.body.agents as Array<{ agent_id: string; services: string[] }>).map((a) => `${a.agent_id}: ${[...a.services].sort()}`)
    })
  }

  /** The same, read in process (cheap enough to run after every case; `state()` runs after every endpoint). */
  const quickState = (): string => {
    const store = server.running.store
    const scopes = [store.forStore(), ...store.agentIds().map((id) => store.forAgent(id))]
    return JSON.stringify({
      file: server.readFileText(),
      folder: readdirSync(server.dir).sort(),
      services: stable(scopes.flatMap((s) => s.listServices()) as unknown as Array<Record<string, unknown>>),
      agents: [...store.agentIds()].sort()
    })
  }
  let initialQuick: string

  beforeAll(async () => {
    server = await startTestServer({
      services: {
        mcpServers: {
          [STORE_SERVICE]: fixtureService(STORE_SERVICE),
          parked: { url: DEAD_URL, disabled: true }
        },
        agents: { [AGENT]: { mcpServers: { [AGENT_SERVICE]: { url: DEAD_URL, disabled: true } } } },
        note: "kept as is"
      },
      // Few health checks: the services' list form stays still while cases run.
      monitoring: { health_check_seconds: 60 }
    })
    for (const [prefix, name] of [["/for_store", STORE_SERVICE], [`/for_agent/${AGENT}`, AGENT_SERVICE]] as const) {
      const target = name === STORE_SERVICE ? "healthy" : "disconnected"
      const wait = await server.post(`${prefix}/wait_service`, { client_id_or_service_name: name, status: target, timeout: 20 })
      expect(wait.body.data?.result, `${name} ${wait.text}`).toBe(true)
    }
    initial = await state()
    initialQuick = quickState()
  }, 30_000)
  afterAll(async () => {
    caseAgent.destroy()
    await server?.cleanup()
  })

  it("the route table is the one the server answers, and every endpoint's input has cases", () => {
    expect(specs.map((s) => `${s.method} ${s.path}`)).toEqual(routeTable().map((r) => `${r.method} ${r.path}`))
    const gaps: string[] = []
    for (const spec of specs) {
      const { cases, uncovered } = casesFor(spec)
      const parts = new Set(cases.map((c) => c.part))
      const needs = [
        "method",
        ...spec.pathParams.map((p) => `path:${p}`),
        ...spec.query.map((f) => `query:${f.name}`),
        ...(spec.payload.kind !== "none" ? [spec.payload.kind === "object" ? "body" : "body"] : []),
        ...(spec.payload.kind === "object" ? spec.payload.fields.map((f) => `body:${f.name}`) : []),
        ...(hasBody(spec.method) ? ["transport"] : [])
      ]
      const noInput = spec.pathParams.length === 0 && spec.query.length === 0 && spec.payload.kind === "none" && !hasBody(spec.method)
      if (noInput) needs.push("query-junk")
      for (const need of needs) if (!parts.has(need)) gaps.push(`${spec.method} ${spec.path}: no bad-input case for ${need}`)
      for (const u of uncovered) gaps.push(`${spec.method} ${spec.path}: cannot derive cases for ${u}`)
      if (cases.filter((c) => c.part !== "method").length === 0) gaps.push(`${spec.method} ${spec.path}: no input case at all`)
    }
    // The variants given to endpoints in turn are each sent.
    const labels = new Set(specs.flatMap((spec) => casesFor(spec).cases.map((c) => c.label)))
    for (const body of MALFORMED_BODIES) if (!labels.has(`malformed JSON ${JSON.stringify(body)}`)) gaps.push(`malformed JSON ${JSON.stringify(body)} sent to no endpoint`)
    for (const type of OTHER_TYPES) if (!labels.has(`content type ${type}`)) gaps.push(`content type ${type} sent to no endpoint`)
    for (const [label] of SCALAR_BODIES) if (!labels.has(`body ${label}`)) gaps.push(`body ${label} sent to no endpoint`)
    expect(gaps).toEqual([])
  })

  for (const spec of specs) {
    it(`${spec.method} ${spec.path}`, { timeout: 60_000 }, async () => {
      const failures: string[] = []
      // The wrong methods are sent by the path-wide test (once per path).
      for (const c of casesFor(spec).cases.filter((c) => c.part !== "method")) {
        const url = server.url + c.url
        const headers = { ...(c.headers ?? {}) }
        let status: number
        let text: string
        let contentType = "application/json"
        const body = c.body
        if (typeof body === "object" || c.headers?.["content-length"] !== undefined) {
          // The body over the limit, framed by its own Content-Length (the server answers 413 and closes the connection).
          const reply = await rawRequest(url, c.method, body, headers).catch((e: Error) => ({ status: 0, text: `no answer: ${e.message}` }))
          ;({ status, text } = reply)
        } else {
          ;({ status, text, contentType } = await sendCase(server.url, c.method, c.url, body, headers))
        }
        const problem = judge(c, status, text, contentType)
        if (problem !== undefined) failures.push(`${c.method} ${c.url.slice(0, 100)} [${c.label}]: ${problem}`)
        // State must not move: compare after every case, so the case that moved it is named.
        const now = quickState()
        if (now !== initialQuick) {
          failures.push(`${c.method} ${c.url.slice(0, 100)} [${c.label}]: CHANGED STATE`)
          expect.soft(now, `state after ${c.label}`).toBe(initialQuick)
          break
        }
      }
      expect(failures).toEqual([])
      expect(await state()).toBe(initial)
    })
  }

  it("wrong method on every path of the route table is 405 METHOD_NOT_ALLOWED naming the allowed methods", async () => {
    // Every endpoint's wrong-method cases (every method its path does not allow), each request once.
    const sent = new Set<string>()
    const failures: string[] = []
    for (const c of specs.flatMap((spec) => casesFor(spec).cases.filter((c) => c.part === "method"))) {
      if (sent.has(`${c.method} ${c.url}`)) continue
      sent.add(`${c.method} ${c.url}`)
      const reply = await sendCase(server.url, c.method, c.url, c.body as string | undefined, c.headers ?? {})
      const problem = judge(c, reply.status, reply.text, reply.contentType)
      if (problem !== undefined) failures.push(`${c.method} ${c.url}: ${problem}`)
    }
    // Every path of the route table, and every method but the ones it allows.
    const paths = new Set(specs.map((s) => fillPath(s.path, baseOf(s).pathValues)))
    expect(new Set([...sent].map((k) => k.slice(k.indexOf(" ") + 1)))).toEqual(new Set([...paths].filter((p) => allowedOn(p).length < METHODS.length)))
    expect(sent.size).toBe([...paths].reduce((n, p) => n + METHODS.length - allowedOn(p).length, 0))
    expect(failures).toEqual([])
    expect(await state()).toBe(initial)
  })

  it("an unknown route is 404 NOT_FOUND, whatever the method", async () => {
    const failures: string[] = []
    const routes = [
      "/no/such/route",
      "/for_store",
      "/for_store/",
      "/for_store/no_such_endpoint",
      "/for_store/list_services/extra",
      "/for_store/delete_service",
      `/for_agent/${AGENT}`,
      `/for_agent/${AGENT}/no_such_endpoint`,
      "/for_agent",
      "/monitoring",
      "/monitoring/no_such_endpoint",
      "/health/extra",
      "/%ff",
      `/${"x".repeat(5000)}`
    ]
    for (const path of routes) {
      for (const method of METHODS) {
        const c: Case = { label: "unknown route", part: "route", method, url: path, expect: { kind: "error", status: [404], codes: ["NOT_FOUND"] } }
        const reply = await sendCase(server.url, method, path, hasBody(method) ? "{}" : undefined, hasBody(method) ? { "content-type": "application/json" } : {})
        const problem = judge(c, reply.status, reply.text, reply.contentType)
        if (problem !== undefined) failures.push(`${method} ${path.slice(0, 60)}: ${problem}`)
      }
    }
    expect(failures).toEqual([])
    expect(await state()).toBe(initial)
  })

  it("after all of it the server still works and nothing changed", async () => {
    expect(await state()).toBe(initial)
    expect((await server.get("/health")).status).toBe(200)
    const call = await server.post("/for_store/call_tool", { tool_name: `${STORE_SERVICE}__echo`, args: { text: "still here" } })
    expect(call.status).toBe(200)
    expect(call.body.result).toBe("still here")
  })
})

describe("a request the HTTP parser refuses", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer()
  })
  afterAll(async () => {
    await server?.cleanup()
  })

  /** Sends raw bytes on a new connection; resolves with everything the server wrote before it closed. */
  const raw = (bytes: string): Promise<string> =>
    new Promise((resolve, reject) => {
      const url = new URL(server.url)
      const socket = connect(Number(url.port), url.hostname)
      let answer = ""
      socket.setEncoding("utf8")
      socket.on("data", (chunk: string) => void (answer += chunk))
      socket.on("error", reject)
      socket.on("close", () => resolve(answer))
      socket.write(bytes)
    })

  it("gets 400 with the contract's error body even while it is still sending its body, not a reset", async () => {
    // An unknown method and a body the server never reads: the answer comes first, then the close.
    const answer = await raw(`FOO /for_store/list_services HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n${"x".repeat(60_000)}`)
    const [head, body] = answer.split("\r\n\r\n")
    expect(head).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/)
    expect(head).toMatch(/connection: close/i)
    expect(JSON.parse(body!)).toMatchObject({ success: false, error: { code: "VALIDATION_ERROR" } })
  })

  it("gets 431 for headers over the limit", async () => {
    const answer = await raw(`GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${"y".repeat(20_000)}\r\n\r\n`)
    expect(answer).toMatch(/^HTTP\/1\.1 431 Request Header Fields Too Large\r\n/)
  })
})
