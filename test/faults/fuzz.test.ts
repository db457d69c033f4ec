// Bad input at scale: a fast-check run of at least 5,000 random and malformed requests over the 56
// endpoints of `routeTable()` (random methods, path segments, query strings, JSON and non-JSON
// bodies, content types, strings up to 2 MiB). No answer may be a 5xx that bad input explains (500,
// or any 5xx outside call_tool's upstream codes), the server must still answer GET /health, and the
// services file must keep its bytes across every batch whose requests were all refused.
//
// Requests go out in batches of 16 at a time. A batch in which a state-changing endpoint answered
// 2xx (a random definition can be valid) is not compared; afterwards the store is put back to its
// starting services. By construction no request can reach a host other than 127.0.0.1 or start a
// program: every URL in a body is rewritten to 127.0.0.1, every `command` to a path that does not exist.
// FUZZ_SEED=<n> replays a run (the seed is printed); FUZZ_REQUESTS=<n> changes its size (default
// 3,200); FUZZ_DUMP=<file> writes every 5xx request and answer there as JSON.
import { request as httpRequest, Agent } from "node:http"
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { routeTable } from "../../src/http/Api.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { readFileSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { endpointSpecs, freshDir, spawnStore, type EndpointSpec, type Field, type StoreProcess } from "../support/index.js"

const TOTAL = Number(process.env.FUZZ_REQUESTS ?? 3_200)
const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31)
const BATCH = 16
/** Longest a request may take before the client gives up (a legitimately long wait_service or call). */
// Generous: a loaded 2-core CI machine can be slow; a request that hangs still shows here.
const CLIENT_TIMEOUT_MS = 10_000
const MIB = 1024 * 1024

const AGENT = "agent-1"
const DEAD_URL = "http://127.0.0.1:9/mcp"
/** Endpoints whose 2xx answer may change the services file or the services. */
const MUTATING = new Set([
  "addService", "resetConfig", "resetMcpJsonFile", "deleteService", "deleteServiceTwoStep", "restartService", "updateService", "disconnectService"
])
/** Endpoints that may legitimately take long (waits, calls, checks of upstreams). */
const MAY_BE_SLOW = new Set(["waitService", "callTool", "useTool", "addService", "updateService", "restartService", "disconnectService", "checkServices", "networkCheck", "refreshTools"])
/** call_tool answers upstream trouble with these; not a bad-input failure. */
const UPSTREAM_CODES = new Set(["UPSTREAM_ERROR", "SERVICE_UNAVAILABLE", "TOOL_TIMEOUT"])
const STATUSES = ["initializing", "healthy", "warning", "reconnecting", "unreachable", "disconnecting", "disconnected"]

// ---------------------------------------------------------------------------------------------
// What a request is
// ---------------------------------------------------------------------------------------------

interface FuzzRequest {
  /** The endpoint's name (e.g. `addService`; the same in the store and agent groups). */
  readonly endpoint: string
  /** `<group>.<name>`, unique. */
  readonly route: string
  readonly method: string
  /** Path and query, as sent. */
  readonly url: string
  readonly contentType: string | undefined
  /** The body, or undefined for none. */
  readonly body: string | undefined
}

interface Outcome {
  readonly request: FuzzRequest
  /** HTTP status, 0 when the connection broke, -1 when the client gave up. */
  readonly status: number
  readonly code: string | undefined
  readonly ms: number
  readonly error?: string
  /** The answer's text, kept for 5xx answers only. */
  readonly text?: string
}

// ---------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------

const TRICKY = [
  "", " ", ".", "..", "../x", "../../etc/passwd", "a__b", "x_byagent_y", "__proto__", "constructor", "prototype", "toString",
  "hasOwnProperty", "\u0000", "%00", "%", "☃", "名前", "a b", "a/b", "a\\b", "-", "_", "x".repeat(64), "x".repeat(65), "x".repeat(101),
  "-1", "0", "1e309", "NaN", "null", "true", "[]", "{}", "<script>alert(1)</script>", "' OR 1=1 --", "\r\n", "\uFEFF", "\uD800"
]

// Long strings are made once: built (and hashed by fast-check) afresh for every request, they were
// most of the run's time.
/** A long field value, up to 200,000 characters. */
const hugeField = fc.constantFrom(...[4_096, 65_536, 200_000].map((n) => "z".repeat(n)))
/** A long query value (over 16 KiB, Node refuses the request before the store sees it: 431). */
const hugeQuery = fc.constantFrom(...[2_000, 9_000, 40_000].map((n) => "q".repeat(n)))

/** encodeURIComponent that also takes lone surrogates (as U+FFFD). */
const enc = (s: string): string => encodeURIComponent(s.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, "\uFFFD"))

/**
 * Any code point, lone surrogates included (as fast-check's `unit: "binary"`, which builds a map of
 * every code point, about 2 s of CPU, for each string arbitrary made with it).
 */
const anyCodePoint = fc.integer({ min: 0, max: 0x10ffff }).map((c) => String.fromCodePoint(c))
/** Names that are not the known ones. */
const otherNames = [
  { weight: 3, arbitrary: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,12}$/) },
  { weight: 3, arbitrary: fc.constantFrom(...TRICKY) },
  { weight: 2, arbitrary: fc.string({ unit: anyCodePoint, maxLength: 24 }) },
  { weight: 2, arbitrary: fc.string({ maxLength: 40 }) }
]
const nameArb = (known: ReadonlyArray<string>) => fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...known) }, ...otherNames)

const numberArb = fc.oneof(
  fc.constantFrom(-1, 0, 0.0001, 1, 5, 30, 31, 59.9, 60, 600, 601, 1000, 1001, 2 ** 31, 2 ** 53, 1e308, -1e308, -0.5),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true })
)

const urlArb = (fixtureUrl: string) =>
  fc.constantFrom(
    DEAD_URL, fixtureUrl, `${fixtureUrl}/sse`, "http://127.0.0.1:9/sse", "https://127.0.0.1:9/", "http://127.0.0.1:99999/", "http://[::1]:9/mcp",
    "ftp://127.0.0.1/x", "file:///etc/passwd", "javascript:alert(1)", "http://", "http:///x", "not a url", "", "//127.0.0.1:9", "HTTP://127.0.0.1:9/MCP"
  )

const leafArb: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: fc.string({ maxLength: 20 }) },
  { weight: 2, arbitrary: numberArb },
  { weight: 1, arbitrary: fc.boolean() },
  { weight: 1, arbitrary: fc.constant(null) },
  { weight: 1, arbitrary: fc.constantFrom(...TRICKY) }
)
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: leafArb },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 1, arbitrary: fc.array(leafArb, { maxLength: 5 }) },
  { weight: 1, arbitrary: fc.dictionary(fc.string({ maxLength: 10 }), leafArb, { maxKeys: 5 }) }
)

/** A value for a field: mostly of its type (with edge values), sometimes anything. */
const fieldValue = (field: Field, names: fc.Arbitrary<string>, fixtureUrl: string, inQuery = false): fc.Arbitrary<unknown> => {
  const s = field.schema
  const typed: fc.Arbitrary<unknown> = (() => {
    if (field.name === "status") return fc.oneof(fc.constantFrom(...STATUSES, "HEALTHY", "up", ""), fc.array(fc.constantFrom(...STATUSES, "nope"), { maxLength: 8 }))
    if (field.name === "endpoints") {
      return fc.array(fc.oneof(urlArb(fixtureUrl), fc.record({ name: anyValue, url: urlArb(fixtureUrl) }, { requiredKeys: [] }), anyValue), { maxLength: 60 })
    }
    if (field.name === "args") return fc.oneof(fc.dictionary(fc.string({ maxLength: 8 }), anyValue, { maxKeys: 4 }), fc.record({ text: anyValue, a: anyValue, b: anyValue, ms: fc.constantFrom(0, 1, 5) }, { requiredKeys: [] }))
    if (s.enum !== undefined) return fc.constantFrom(...s.enum)
    switch (s.type) {
      case "integer":
      case "number":
        return numberArb
      case "boolean":
        return fc.boolean()
      case "string":
        return /name|service|tool|client_id/.test(field.name) ? names : fc.oneof(names, fc.constantFrom("store", "all", "agent", "success", "timeout", "2024-01-01T00:00:00Z", "yesterday"))
      default:
        return anyValue
    }
  })()
  // A query string over 16 KiB is refused by Node before the store sees it (431): keep those rare.
  const huge = inQuery ? { weight: 1, arbitrary: hugeQuery } : { weight: 4, arbitrary: hugeField }
  return fc.oneof({ weight: 16, arbitrary: typed }, { weight: 4, arbitrary: anyValue }, huge)
}

/** A service definition in any state of repair (add_service, update_service). */
const definitionArb = (names: fc.Arbitrary<string>, fixtureUrl: string) =>
  fc.record(
    {
      name: fc.oneof(names, anyValue),
      url: fc.oneof(urlArb(fixtureUrl), anyValue),
      command: fc.oneof(fc.string({ maxLength: 12 }), anyValue),
      args: fc.oneof(fc.array(fc.string({ maxLength: 12 }), { maxLength: 4 }), anyValue),
      env: fc.oneof(fc.dictionary(fc.string({ maxLength: 8 }), fc.string({ maxLength: 8 }), { maxKeys: 3 }), anyValue),
      cwd: anyValue,
      transport: fc.oneof(fc.constantFrom("streamable_http", "streamable-http", "http", "sse", "stdio", "websocket"), anyValue),
      type: fc.oneof(fc.constantFrom("stdio", "http", "sse", "ws"), anyValue),
      headers: fc.oneof(fc.dictionary(fc.string({ maxLength: 8 }), fc.string({ maxLength: 8 }), { maxKeys: 3 }), anyValue),
      disabled: anyValue,
      extra: anyValue
    },
    { requiredKeys: [] }
  )

const MALFORMED = [
  "{", "}", "[1,", '{"a":}', "nul", "tru", "\uFEFF{}", "{'a': 1}", '{"a":1}{"b":2}', "NaN", "Infinity", "-", '"unterminated', "[]]", "{,}",
  '{"tool_name": "x",}', "\u0000", "\n\n", '{"__proto__": {"polluted": true}}', '{"constructor": {"prototype": {"x": 1}}}'
]
const deepNest = (n: number) => `${"[".repeat(n)}${"]".repeat(n)}`
const deepObject = (n: number) => `${'{"a":'.repeat(n)}1${"}".repeat(n)}`
/** Up to 200 code points of any kind, as the whole body. */
const binaryBody = fc.string({ unit: anyCodePoint, maxLength: 200 }).map((raw) => ({ raw }))
const deepBodies = fc.constantFrom(deepNest(50_000), deepObject(20_000), deepNest(400)).map((raw) => ({ raw }))
/** Arguments nested deep (a tool call's args are forwarded and recorded). */
const deepArguments = fc.constantFrom(...[100, 2_000, 10_000].map((n) => `{"tool_name":"live__echo","args":{"text":${deepObject(n)}}}`)).map((raw) => ({ raw }))
/** Every name field of a body at once, up to 2 MiB each. */
const hugeNames = fc
  .constantFrom(...[4_096, 65_536, 300_000, MIB + 1, 2 * MIB].map((n) => "z".repeat(n)).map((h) => JSON.stringify({ tool_name: h, name: h, service_name: h, client_id_or_service_name: h })))
  .map((raw) => ({ raw }))

const bodyArb = (spec: EndpointSpec, names: fc.Arbitrary<string>, fixtureUrl: string): fc.Arbitrary<unknown | { raw: string } | undefined> => {
  const fields = spec.payload.kind === "object" ? spec.payload.fields : spec.query
  const known = fields.length > 0
    ? fc.record(Object.fromEntries(fields.map((f) => [f.name, fieldValue(f, names, fixtureUrl)])), { requiredKeys: [] })
    : fc.constant({})
  const withExtra = fc.tuple(known, fc.dictionary(fc.string({ maxLength: 10 }), anyValue, { maxKeys: 3 })).map(([a, b]) => ({ ...b, ...a }))
  const definitions = fc.oneof(
    definitionArb(names, fixtureUrl),
    fc.array(definitionArb(names, fixtureUrl), { maxLength: 4 }),
    fc.record({ mcpServers: fc.oneof(fc.dictionary(names, definitionArb(names, fixtureUrl), { maxKeys: 3 }), anyValue) })
  )
  const structured = spec.payload.kind === "opaque" ? fc.oneof({ weight: 3, arbitrary: definitions }, { weight: 1, arbitrary: withExtra }) : withExtra
  return fc.oneof(
    { weight: 8, arbitrary: structured },
    { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 4 }) },
    { weight: 2, arbitrary: fc.constantFrom(...MALFORMED).map((raw) => ({ raw })) },
    { weight: 1, arbitrary: binaryBody },
    { weight: 1, arbitrary: deepBodies },
    { weight: 1, arbitrary: deepArguments },
    { weight: 1, arbitrary: hugeNames },
    { weight: 2, arbitrary: fc.constant(undefined) }
  )
}

const CONTENT_TYPES = [
  "application/json", "application/json; charset=utf-8", "APPLICATION/JSON", "application/json;charset=latin1", "text/plain",
  "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml", "", "application/vnd.api+json", "*/*", "json",
  "application/json, text/plain", "text/json",
  // What a web page may send without a preflight, and near misses of the JSON media type.
  "text/plain; charset=application/json", "text/plain;charset=UTF-8", "application/jsonx", "application/json-seq", "application/json+x", " application/json"
]

/** The media type the contract accepts: exactly application/json, parameters allowed. */
const isJsonType = (type: string | undefined): boolean => type !== undefined && type.split(";", 1)[0]!.trim().toLowerCase() === "application/json"
const BODY_METHODS = new Set(["POST", "PUT", "PATCH", "DELETE"])
/** Routes whose body may be a JSON array (add_service's list form). */
const takesArray = (url: string) => /\/add_service\/?(\?|$)/.test(url)

/**
 * What the contract says a body alone decides, before any route or field is looked at: a body
 * sent with another content type is 415; a JSON body that is not an object (an array except where
 * one is taken) is 400. Undefined when the body leaves it to the endpoint.
 */
const bodyVerdict = (r: FuzzRequest): 415 | 400 | undefined => {
  if (!BODY_METHODS.has(r.method) || r.body === undefined || r.body.length === 0) return undefined
  // A long body's shape is read once and kept (shapeOf); a short one's parsed only when it is sent as JSON.
  const long = r.body.length >= 64 * 1024
  if (long ? shapeOf(r.body) === "over the limit" : Buffer.byteLength(r.body) > MIB) return undefined
  if (!isJsonType(r.contentType)) return 415
  const shape = long ? shapeOf(r.body) : readShape(r.body)
  if (shape === "malformed" || shape === "not an object" || (shape === "an array" && !takesArray(r.url))) return 400
  return undefined
}

type BodyShape = "over the limit" | "malformed" | "not an object" | "an array" | "an object"
const readShape = (body: string): BodyShape => {
  if (Buffer.byteLength(body) > MIB) return "over the limit"
  let parsed: unknown
  try {
    parsed = JSON.parse(body)
  } catch {
    return "malformed"
  }
  return typeof parsed !== "object" || parsed === null ? "not an object" : Array.isArray(parsed) ? "an array" : "an object"
}
/**
 * A long body's shape, found once and kept (the constant huge and deep bodies come back
 * hundreds of times: parsing them again for every answer was a tenth of this process's CPU). At
 * most 32 are kept; when full, they are dropped together.
 */
const shapes = new Map<string, BodyShape>()
const shapeOf = (body: string): BodyShape => {
  let shape = shapes.get(body)
  if (shape === undefined) {
    shape = readShape(body)
    if (shapes.size >= 32) shapes.clear()
    shapes.set(body, shape)
  }
  return shape
}

/** A path segment as it travels (already encoded, or deliberately not). */
const segmentArb = (names: fc.Arbitrary<string>) =>
  fc.oneof(
    { weight: 5, arbitrary: names.map(enc) },
    { weight: 2, arbitrary: fc.constantFrom("%", "%zz", "%ff", "%c0%ae", "..", ".", "%2e%2e", "a%2Fb", "%00", "%20", "x".repeat(5_000), "x".repeat(20_000), ";x", "a?b", "a#b") }
  )

const queryArb = (spec: EndpointSpec, names: fc.Arbitrary<string>, fixtureUrl: string) => {
  const keys = [...spec.query.map((f) => f.name), "scope", "wait", "limit", "agent_id", "x"]
  const pair = fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...keys).chain((k) => {
      const field = spec.query.find((f) => f.name === k) ?? { name: k, required: false, schema: {} }
      return fieldValue(field, names, fixtureUrl, true).map((v) => `${enc(k)}=${enc(typeof v === "string" ? v : JSON.stringify(v) ?? "")}`)
    }) },
    { weight: 1, arbitrary: fc.constantFrom("=", "&", "a=%zz", "limit=1&limit=2", "limit", "limit=", "%=1", "wait=1e3", "scope[]=all", "days=-0", "hours=NaN", "minutes=Infinity") },
    { weight: 1, arbitrary: fc.string({ maxLength: 30 }).map(enc) }
  )
  return fc.array(pair, { maxLength: 5 }).map((pairs) => (pairs.length === 0 ? "" : `?${pairs.join("&")}`))
}

/** Rewrites what could reach outside: URLs to 127.0.0.1, commands to a path that does not exist. */
const sanitize = (value: unknown, key?: string): unknown => {
  if (typeof value === "string") {
    if (key === "command") return `/nonexistent-fuzz/${value.replace(/\//g, "_")}`
    // (A URL has "://": a long value without it is not run through the pattern.)
    const m = !value.includes("://") ? null : /^\s*([a-z][a-z0-9+.-]*):\/\/([^/?#]*)/i.exec(value)
    if (m !== null) {
      const host = m[2]!.replace(/^[^@]*@/, "").replace(/:\d*$/, "").toLowerCase()
      if (host !== "127.0.0.1" && host !== "[::1]" && host !== "") return DEAD_URL
    }
    return value
  }
  if (Array.isArray(value)) return value.map((v) => sanitize(v))
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) Object.defineProperty(out, k, { value: sanitize(v, k), enumerable: true, writable: true, configurable: true })
    return out
  }
  return value
}

/**
 * A random path: segments of the characters a path may carry (raw `%` included) or of any code
 * points, encoded. (fast-check's `webPath` builds a table of every encodable character, about 2 s of CPU.)
 */
const webPaths = fc
  .array(fc.oneof(fc.stringMatching(/^[A-Za-z0-9\-._~!$&'()*+,;=:@%]{0,10}$/), fc.string({ unit: anyCodePoint, maxLength: 6 }).map(enc)), { maxLength: 5 })
  .map((segments) => `/${segments.join("/")}`)

/** Requests to one endpoint (built once per endpoint: `requestArb` picks among them). */
const endpointRequestArb = (spec: EndpointSpec, fixtureUrl: string): fc.Arbitrary<FuzzRequest> => {
  const agentRoute = spec.path.startsWith("/for_agent/")
  const names = nameArb(agentRoute ? ["agent-live", "live", "dead"] : ["live", "dead", "agent-live"])
  const agents = nameArb([AGENT, "agent-2"])
  return fc
    .record({
      method: fc.oneof({ weight: 6, arbitrary: fc.constant(spec.method) }, { weight: 2, arbitrary: fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS") }, { weight: 1, arbitrary: fc.constantFrom("FOO", "get", "PROPFIND") }),
      params: fc.record(Object.fromEntries(spec.pathParams.map((p) => [p, segmentArb(p === "agent_id" ? agents : names)]))),
      mutation: fc.oneof({ weight: 8, arbitrary: fc.constant("none") }, { weight: 1, arbitrary: fc.constantFrom("trailing-slash", "double-slash", "upper", "extra-segment", "drop-segment", "dot-segment", "random") }),
      randomPath: webPaths,
      query: queryArb(spec, names, fixtureUrl),
      contentType: fc.oneof({ weight: 6, arbitrary: fc.constant("application/json") }, { weight: 3, arbitrary: fc.constantFrom(...CONTENT_TYPES) }, { weight: 1, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.string({ maxLength: 20 }) }),
      body: bodyArb(spec, names, fixtureUrl),
      bodyOnGet: fc.boolean()
    })
    .map((r) => {
      let path = spec.path.replace(/:([A-Za-z_]+)/g, (_, p: string) => (r.params as Record<string, string>)[p]!)
      switch (r.mutation) {
        case "trailing-slash": path += "/"; break
        case "double-slash": path = path.replace("/", "//"); break
        case "upper": path = path.toUpperCase(); break
        case "extra-segment": path += "/extra"; break
        case "drop-segment": path = path.slice(0, path.lastIndexOf("/")) || "/"; break
        case "dot-segment": path = `/x/..${path}`; break
        case "random": path = r.randomPath.startsWith("/") ? r.randomPath : `/${r.randomPath}`; break
      }
      const hasBody = r.body !== undefined && (r.method !== "GET" && r.method !== "HEAD" ? true : r.bodyOnGet)
      const body = !hasBody ? undefined : typeof r.body === "object" && r.body !== null && "raw" in r.body && Object.keys(r.body).length === 1 ? (r.body as { raw: string }).raw : JSON.stringify(sanitize(r.body))
      return { endpoint: spec.name, route: `${spec.group}.${spec.name}`, method: r.method, url: path + r.query, contentType: r.contentType, body }
    })
}

/** A request to any endpoint, each equally likely. */
const requestArb = (specs: ReadonlyArray<EndpointSpec>, fixtureUrl: string): fc.Arbitrary<FuzzRequest> =>
  fc.oneof(...specs.map((spec) => endpointRequestArb(spec, fixtureUrl)))

// ---------------------------------------------------------------------------------------------
// Sending
// ---------------------------------------------------------------------------------------------

const agent = new Agent({ keepAlive: true, maxSockets: BATCH })
/** Sockets given a listener for errors that come after their request settled (see `send`). */
const guarded = new WeakSet<object>()

/**
 * A body's bytes, the same bytes the string would be sent as: a long one (the constant huge and
 * deep bodies come back hundreds of times) encoded once and kept, so that a request hands the socket
 * a Buffer instead of a string of up to 8 MiB to encode again (that encoding was a third of this
 * process's CPU). At most 32 are kept; when full, they are dropped together.
 */
const encoded = new Map<string, Buffer>()
const bytesOf = (body: string): Buffer | string => {
  if (body.length < 64 * 1024) return body
  let bytes = encoded.get(body)
  if (bytes === undefined) {
    bytes = Buffer.from(body, "utf8")
    if (encoded.size >= 32) encoded.clear()
    encoded.set(body, bytes)
  }
  return bytes
}

const send = (base: string, r: FuzzRequest): Promise<Outcome> =>
  new Promise((resolve) => {
    const started = performance.now()
    const headers: Record<string, string> = {}
    if (r.contentType !== undefined && r.body !== undefined) headers["content-type"] = r.contentType
    // Node's client sends a GET/DELETE/HEAD/OPTIONS body unframed (no length); frame every body, or the
    // server reads it as a second, malformed request on the same connection.
    const payload = r.body === undefined ? undefined : bytesOf(r.body)
    if (payload !== undefined) headers["content-length"] = String(Buffer.byteLength(payload))
    let settled = false
    const done = (status: number, text: string, error?: string) => {
      if (settled) return
      settled = true
      let code: string | undefined
      try {
        code = (JSON.parse(text) as { error?: { code?: string } }).error?.code
      } catch {
        // not JSON
      }
      resolve({ request: r, status, code, ms: performance.now() - started, ...(error !== undefined ? { error } : {}), ...(status >= 500 ? { text: text.slice(0, 300) } : {}) })
    }
    let req: ReturnType<typeof httpRequest>
    try {
      req = httpRequest(`${base}${r.url}`, { method: r.method, headers, agent }, (res) => {
        const chunks: Buffer[] = []
        res.on("data", (c: Buffer) => chunks.push(c))
        res.on("end", () => done(res.statusCode ?? 0, Buffer.concat(chunks).toString("utf8")))
        res.on("error", (e) => done(res.statusCode ?? 0, "", e.message))
      })
    } catch (e) {
      // The client itself refuses it (e.g. a character Node does not allow in a path): nothing was sent.
      done(-2, "", (e as Error).message)
      return
    }
    // A body the server did not read (a GET with 8 MiB) may still be flushing on a pooled socket after
    // the answer came; its write then fails with no request listening. That is this client's concern.
    req.on("socket", (socket) => {
      if (guarded.has(socket)) return
      guarded.add(socket)
      socket.on("error", () => {})
    })
    req.setTimeout(CLIENT_TIMEOUT_MS, () => {
      done(-1, "", "client time-out")
      req.destroy()
    })
    req.on("error", (e) => done(0, "", e.message))
    req.end(payload)
  })

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

describe("bad input at scale (fast-check)", () => {
  let server: StoreProcess
  let configFile: string
  /** The services file's text. */
  const fileText = () => readFileSync(configFile, "utf8")
  /** The services file as the store wrote it with the starting services. */
  let baseline = ""
  let fixture: HttpFixture
  const BASELINE = (url: string) => ({ store: { live: { url }, dead: { url: DEAD_URL } }, agent: { "agent-live": { url } } })

  beforeAll(async () => {
    fixture = await startHttpFixture()
    const base = BASELINE(fixture.url)
    configFile = join(freshDir(), "mcp.json")
    writeFileSync(configFile, JSON.stringify({ mcpServers: base.store, agents: { [AGENT]: { mcpServers: base.agent } } }))
    // The store in a process of its own (the program as users run it): the requests are made here
    // while it answers them there.
    server = await spawnStore({
      configFile,
      // Health checks at a calm pace: the run is about the HTTP layer.
      monitoring: { health_check_seconds: 5, reconnection_seconds: 1, max_reconnect_attempts: 2, unreachable_retry_seconds: 5 }
    })
    const ready = await server.post("/for_store/wait_service", { client_id_or_service_name: "live", status: "healthy", timeout: 15 })
    expect(ready.body.data.result).toBe(true)
    baseline = fileText()
  }, 30_000)
  afterAll(async () => {
    agent.destroy()
    await server?.kill()
    await fixture?.stop()
    if (configFile !== undefined) rmSync(dirname(configFile), { recursive: true, force: true })
  }, 20_000)

  /**
   * Puts the store back to its starting services (after a batch with a successful change): the
   * services file says which services are defined, and disabled, in every scope.
   */
  const restore = async () => {
    if (fileText() === baseline) return false
    const base = BASELINE(fixture.url)
    expect((await server.post("/for_store/reset_mcp_json_file")).status).toBe(200)
    expect((await server.post("/for_store/add_service", { mcpServers: base.store })).status).toBe(200)
    expect((await server.post(`/for_agent/${AGENT}/add_service`, { mcpServers: base.agent })).status).toBe(200)
    baseline = fileText()
    return true
  }

  // CPU-bound: the requests are made in this process and answered in the store's, so the run uses
  // both cores when the other fork leaves one. A hang still shows at once: every request has its
  // own 10 s client time-out.
  it(`${TOTAL} random and malformed requests over every endpoint of the contract: no 5xx, the server still answers, refused requests change nothing`, { timeout: 300_000 }, async () => {
    const routes = routeTable()
    // The contract's 56 endpoints and the routes added since (resources, prompts, authorize_service).
    expect(routes.length).toBeGreaterThanOrEqual(56)
    const specs = await endpointSpecs()
    expect(specs.map((s) => `${s.method} ${s.path}`)).toEqual(routes.map((r) => `${r.method} ${r.path}`))

    const outcomes: Outcome[] = []
    const serverErrors: Outcome[] = []
    const upstream5xx: Outcome[] = []
    const slow: Outcome[] = []
    /** A batch of refusals that changed the file: its requests, the batch before it (whose change may have landed late), the file before and after. */
    const fileChanges: Array<{ batch: number; requests: string[]; previousBatch: string[]; before: string; after: string }> = []
    const shown = (o: Outcome) => `${o.status} ${o.request.method} ${o.request.url.slice(0, 120)}${o.request.body === undefined ? "" : ` ${o.request.body.slice(0, 200)}`}`
    let previousBatch: string[] = []
    const wrongVerdicts: string[] = []
    /** The outcomes whose body alone decides the answer (`bodyVerdict`), in order. */
    const judged: Outcome[] = []
    let batches = 0
    let checkedBatches = 0
    let checkedRefusals = 0
    let restores = 0
    const started = performance.now()
    await fc.assert(
      fc.asyncProperty(fc.array(requestArb(specs, fixture.url), { minLength: BATCH, maxLength: BATCH }), async (batch) => {
        const before = fileText()
        const results = await Promise.all(batch.map((r) => send(server.url, r)))
        batches += 1
        outcomes.push(...results)
        for (const o of results) {
          if (o.status >= 500) {
            const upstreamCall = (o.request.endpoint === "callTool" || o.request.endpoint === "useTool") && o.code !== undefined && UPSTREAM_CODES.has(o.code)
            ;(upstreamCall ? upstream5xx : serverErrors).push(o)
          }
          if (o.status === -1 && !MAY_BE_SLOW.has(o.request.endpoint)) slow.push(o)
          const verdict = bodyVerdict(o.request)
          if (verdict !== undefined) judged.push(o)
          // 401/403 come first (no key, a refused Host): the fuzz sends neither, so the body decides;
          // Node itself refuses a URL over its header limit (431) before anything else runs.
          if (verdict !== undefined && o.status !== verdict && o.status !== -2 && o.status !== 431) {
            wrongVerdicts.push(`${o.status} (want ${verdict}) ${o.request.method} ${o.request.url.slice(0, 80)} ct=${o.request.contentType} body=${o.request.body?.slice(0, 60)}`)
          }
        }
        // A change answered 2xx, or one the client gave up on (it may have been carried out after): not compared.
        const changed = results.some((o) => MUTATING.has(o.request.endpoint) && ((o.status >= 200 && o.status < 300) || o.status === -1))
        if (!changed) {
          checkedBatches += 1
          checkedRefusals += results.filter((o) => o.status >= 400 && o.status < 500).length
          const after = fileText()
          if (after !== before) fileChanges.push({ batch: batches, requests: results.map(shown), previousBatch, before, after })
        } else if (await restore()) {
          restores += 1
        }
        previousBatch = results.map(shown)
        // The server must keep answering.
        const health = await fetch(`${server.url}/health`, { signal: AbortSignal.timeout(5_000) })
        return health.status === 200
      }),
      { numRuns: Math.ceil(TOTAL / BATCH), seed: SEED, endOnFailure: true }
    )
    const seconds = (performance.now() - started) / 1000
    if (process.env.FUZZ_DUMP !== undefined) {
      const { writeFileSync } = await import("node:fs")
      writeFileSync(process.env.FUZZ_DUMP, JSON.stringify(serverErrors.map((o) => ({ ...o.request, body: o.request.body?.slice(0, 3000), status: o.status, text: o.text })), null, 1))
    }

    const byStatus: Record<string, number> = {}
    for (const o of outcomes) byStatus[o.status] = (byStatus[o.status] ?? 0) + 1
    const byEndpoint = new Map<string, number>()
    for (const o of outcomes) byEndpoint.set(o.request.route, (byEndpoint.get(o.request.route) ?? 0) + 1)
    console.log(
      [
        `fuzz: ${outcomes.length} requests tried in ${seconds.toFixed(1)} s (seed ${SEED}, ${batches} batches of ${BATCH})`,
        `  by status: ${Object.entries(byStatus).map(([s, n]) => `${s}: ${n}`).join(", ")}  (0 = connection closed by the server, -1 = client gave up after ${CLIENT_TIMEOUT_MS} ms, -2 = not sendable)`,
        `  5xx explained by bad input: ${serverErrors.length}; call_tool upstream 5xx (contract codes): ${upstream5xx.length}`,
        `  file compared after ${checkedBatches} batches (${checkedRefusals} refused requests); changed: ${fileChanges.length}; state restored ${restores} times`,
        `  endpoints hit: ${byEndpoint.size} of ${routes.length} (fewest: ${Math.min(...byEndpoint.values())} requests)`,
        ...fileChanges.slice(0, 3).map((c) => `  file changed in batch ${c.batch}:\n    ${c.requests.join("\n    ")}`),
        ...serverErrors.slice(0, 10).map((o) => `  5xx: ${o.status} ${o.code ?? ""} ${o.request.method} ${o.request.url.slice(0, 150)} ct=${o.request.contentType} body=${(o.request.body ?? "").slice(0, 150)}`)
      ].join("\n")
    )

    expect(outcomes.length).toBeGreaterThanOrEqual(TOTAL)
    expect(byEndpoint.size).toBe(routes.length)
    expect(serverErrors.map((o) => `${o.status} ${o.code ?? ""} ${o.request.method} ${o.request.url.slice(0, 100)}`)).toEqual([])
    expect(fileChanges).toEqual([])
    expect(wrongVerdicts.slice(0, 20)).toEqual([])
    expect(judged.filter((o) => o.status === 415).length).toBeGreaterThan(100)
    expect(judged.filter((o) => o.status === 400).length).toBeGreaterThan(100)
    expect(slow.map((o) => `${o.request.method} ${o.request.url.slice(0, 100)}`)).toEqual([])
    // Bad input never loses the connection without an answer, except a body over the limit (413, then closed) or a header too large.
    const cut = outcomes.filter((o) => o.status === 0 && (o.request.body?.length ?? 0) <= MIB && o.request.url.length < 8_000)
    expect(cut.map((o) => `${o.error} ${o.request.method} ${o.request.url.slice(0, 100)}`)).toEqual([])
    expect((await server.get("/health")).status).toBe(200)
    expect((await server.get("/")).status).toBe(200)
    JSON.parse(fileText())
  })
})
