// The OpenAPI document and the docs page over real HTTP: GET /openapi.json is OpenAPI 3.1 and lists
// exactly the route table's endpoints (path parameters as {name}, each declared), grouped by tags
// whose operation counts equal the root's endpoint counts; documented error bodies are the
// contract's; the whole document is pinned by a committed snapshot (__snapshots__/openapi.json), so
// any change to the contract shows up as a diff in review (`npx vitest run -u test/http/openapi.test.ts`
// writes it again); GET /docs is an HTML page that works without internet (nothing loaded from elsewhere).
// Tools we did not write accept it: @apidevtools/swagger-parser validates it,
// openapi-typescript generates types from it; no `$id` is given twice; every request body and 200
// answer has an example that decodes with its endpoint's own schemas (no field the schema lacks),
// every error answer one its error class decodes (src/http/examples.json, captured from a running
// store by `npm run examples`: a change of the contract the examples no longer fit fails here);
// the extra routes are described; with an API key, /docs (with its Authorize button) and
// /openapi.json are served without it, the request guard still applying.
import SwaggerParser from "@apidevtools/swagger-parser"
import { HttpApiSchema } from "@effect/platform"
import { Either, Option, Schema } from "effect"
import openapiTS, { astToString } from "openapi-typescript"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Api, endpointCounts, routeTable } from "../../src/http/Api.js"
import * as E from "../../src/http/contract-errors.js"
import { EXTRA_ROUTES } from "../../src/http/extras.js"
import { ERROR_EXAMPLES, EXAMPLES, EXTRA_DOCS } from "../../src/http/openapi.js"
import { rawRequest, startTestServer, toOpenApiPath, type TestServer } from "../support/index.js"

const OPERATION_METHODS = ["get", "post", "put", "delete", "patch", "head", "options", "trace"]

/** JSON with every object's keys sorted (arrays keep their order), two-space indent, final newline: a text that changes only when the document does. */
const stableJson = (value: unknown): string => {
  const sorted = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(sorted)
      : v !== null && typeof v === "object"
        ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted((v as Record<string, unknown>)[k])]))
        : v
  return `${JSON.stringify(sorted(value), null, 2)}\n`
}

interface Operation {
  readonly tags?: ReadonlyArray<string>
  readonly operationId?: string
  readonly parameters?: ReadonlyArray<{ name: string; in: string; required?: boolean }>
  readonly responses?: Record<string, { content?: Record<string, { schema?: Record<string, unknown> }> }>
}

describe("OpenAPI document and docs page", () => {
  let server: TestServer
  let doc: { openapi: string; paths: Record<string, Record<string, Operation>>; tags?: Array<{ name: string }>; components?: { schemas?: Record<string, any> } }
  let operations: Array<{ method: string; path: string; op: Operation }>

  beforeAll(async () => {
    server = await startTestServer({ services: { mcpServers: {} } })
    const reply = await server.get("/openapi.json")
    expect(reply.status).toBe(200)
    expect(reply.headers.get("content-type") ?? "").toMatch(/application\/json/)
    doc = reply.body
    operations = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.entries(item)
        .filter(([method]) => OPERATION_METHODS.includes(method))
        .map(([method, op]) => ({ method: method.toUpperCase(), path, op }))
    )
  })
  afterAll(async () => {
    await server?.cleanup()
  })

  it("is OpenAPI 3.1", () => {
    expect(typeof doc.openapi).toBe("string")
    expect(doc.openapi.startsWith("3.1")).toBe(true)
  })

  it("lists exactly the route table's endpoints, path parameters as {name}", () => {
    const documented = operations.map((o) => `${o.method} ${o.path}`).sort()
    const table = routeTable().map((r) => `${r.method} ${toOpenApiPath(r.path)}`).sort()
    expect(documented).toEqual(table)
    expect(new Set(documented).size).toBe(documented.length)
    for (const { path } of operations) expect(path, path).not.toMatch(/:[A-Za-z_]/)
  })

  it("declares every path parameter as a required path parameter", () => {
    for (const { method, path, op } of operations) {
      const inPath = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1])
      const declared = (op.parameters ?? []).filter((p) => p.in === "path")
      expect(declared.map((p) => p.name).sort(), `${method} ${path}`).toEqual([...inPath].sort())
      for (const p of declared) expect(p.required, `${method} ${path} ${p.name}`).toBe(true)
    }
  })

  it("gives each operation a unique operationId and the tag of its group", () => {
    const ids = operations.map((o) => o.op.operationId)
    for (const id of ids) expect(typeof id).toBe("string")
    expect(new Set(ids).size).toBe(ids.length)
    const groupOf = new Map(routeTable().map((r) => [`${r.method} ${toOpenApiPath(r.path)}`, r.group]))
    for (const { method, path, op } of operations) expect(op.tags, `${method} ${path}`).toEqual([groupOf.get(`${method} ${path}`)])
  })

  it("the root's counts equal endpointCounts(), and with the groups' extras the document's operations per tag", async () => {
    const root = await server.get("/")
    expect(root.status).toBe(200)
    expect(root.body.endpoints).toEqual(endpointCounts())
    const perTag: Record<string, number> = {}
    for (const { op } of operations) for (const tag of op.tags ?? []) perTag[tag] = (perTag[tag] ?? 0) + 1
    const counts = { ...endpointCounts() } as Record<string, number>
    const extras = new Set(root.body.extra_routes as string[])
    for (const { method, path, op } of operations) if (extras.has(`${method} ${path}`)) for (const tag of op.tags ?? []) counts[tag] = (counts[tag] ?? 0) + 1
    expect(perTag).toEqual(Object.fromEntries(Object.entries(counts).filter(([, n]) => n > 0)))
    expect(operations.length).toBe(Object.values(counts).reduce((a, b) => a + b, 0))
    // Every group with endpoints is a declared tag.
    const tags = (doc.tags ?? []).map((t) => t.name)
    for (const [group, n] of Object.entries(counts)) if (n > 0) expect(tags).toContain(group)
  })

  it("documents every error response with the contract's error body", () => {
    const schemas = doc.components?.schemas ?? {}
    const resolve = (s: any): any => (typeof s?.$ref === "string" ? resolve(schemas[s.$ref.replace("#/components/schemas/", "")]) : s)
    const isContractError = (s: any): boolean => {
      const r = resolve(s)
      if (Array.isArray(r?.anyOf)) return r.anyOf.every(isContractError)
      const props = r?.properties ?? {}
      const error = resolve(props.error)
      return (
        props.success !== undefined &&
        props.message !== undefined &&
        error?.properties?.code !== undefined &&
        error?.properties?.message !== undefined &&
        error?.properties?.details !== undefined
      )
    }
    const wrong: string[] = []
    for (const { method, path, op } of operations) {
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        if (Number(status) < 400) continue
        const schema = response.content?.["application/json"]?.schema
        if (schema === undefined || !isContractError(schema)) wrong.push(`${method} ${path} ${status}: ${JSON.stringify(schema).slice(0, 120)}`)
      }
    }
    // Report each distinct problem once.
    expect([...new Set(wrong.map((w) => w.replace(/^\S+ \S+ /, "")))]).toEqual([])
  })

  it("shows the domain's schemas (src/domain/schemas.ts) as components, every $ref resolved", () => {
    const schemas = doc.components?.schemas ?? {}
    for (const name of ["AddServiceBody", "NamedServiceDefinition", "McpServersBody", "ServiceDefinition", "UpdateServiceBody", "ServiceName", "AgentId", "ToolName", "ServiceRef", "Status", "Transition"]) {
      expect(schemas[name], name).toBeTypeOf("object")
    }
    const dangling = [...JSON.stringify(doc).matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)].map((m) => m[1]!).filter((name) => schemas[name] === undefined)
    expect([...new Set(dangling)]).toEqual([])
    // A definition: its fields, the rule that ties them, an example; extras allowed.
    const definition = schemas.ServiceDefinition
    expect(Object.keys(definition.properties).sort()).toEqual(["args", "command", "cwd", "disabled", "env", "envFile", "excludeTools", "exclude_tools", "headers", "includeTools", "include_tools", "oauth", "per_user", "pin", "protocol_version", "require_approval", "roots", "transport", "type", "url"])
    expect(definition.description).toMatch(/exactly one of the two/)
    expect(definition.examples.length).toBeGreaterThan(0)
    expect(definition.additionalProperties).not.toBe(false)
    expect(schemas.NamedServiceDefinition.required).toEqual(["name"])
    expect(schemas.NamedServiceDefinition.properties.name).toEqual({ $ref: "#/components/schemas/ServiceName" })
    expect(schemas.ServiceName.pattern).toBe("^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    expect(schemas.AgentId.pattern).toBe("^[A-Za-z0-9_-]{1,100}$")
    expect(schemas.Status.enum).toEqual(["initializing", "healthy", "warning", "reconnecting", "unreachable", "disconnecting", "disconnected"])
    // add_service's body: its three forms; update_service's: a definition whose name may be left out.
    const bodyOf = (method: string, path: string) => (doc.paths[path]?.[method] as any)?.requestBody?.content?.["application/json"]?.schema
    for (const prefix of ["/for_store", "/for_agent/{agent_id}"]) {
      expect(bodyOf("post", `${prefix}/add_service`), prefix).toEqual({ $ref: "#/components/schemas/AddServiceBody" })
      expect(bodyOf("post", `${prefix}/call_tool`), prefix).toEqual({ $ref: "#/components/schemas/CallToolPayload" })
    }
    expect(schemas.AddServiceBody.anyOf).toEqual([
      { $ref: "#/components/schemas/NamedServiceDefinition" },
      { $ref: "#/components/schemas/McpServersBody" },
      { type: "array", items: { $ref: "#/components/schemas/NamedServiceDefinition" } }
    ])
    expect(bodyOf("put", "/for_store/update_service/{service_name}")).toEqual({ $ref: "#/components/schemas/UpdateServiceBody" })
    expect(schemas.UpdateServiceBody.required).toEqual([])
    // call_tool's body: its fields only (an unknown one is refused), `arguments` the alias of `args`.
    expect(schemas.CallToolPayload.properties.tool_name).toEqual({ $ref: "#/components/schemas/ToolName" })
    expect(Object.keys(schemas.CallToolPayload.properties)).toEqual(["tool_name", "args", "arguments", "service_name", "timeout", "accept_input_required", "request_state", "input_responses", "async"])
    expect(schemas.CallToolPayload.additionalProperties).toBe(false)
    // Path parameters: agent ids and service references by name.
    for (const { method, path, op } of operations) {
      for (const p of (op.parameters ?? []) as ReadonlyArray<{ name: string; in: string; schema?: unknown }>) {
        if (p.in === "path" && p.name === "agent_id") expect(p.schema, `${method} ${path}`).toEqual({ $ref: "#/components/schemas/AgentId" })
        if (p.in === "path" && p.name === "service_name") expect(p.schema, `${method} ${path}`).toEqual({ $ref: "#/components/schemas/ServiceRef" })
      }
    }
  })

  it("is the committed document, byte for byte (update it with `npx vitest run -u test/http/openapi.test.ts`)", async () => {
    await expect(stableJson(doc)).toMatchFileSnapshot("./__snapshots__/openapi.json")
  })

  it("gives no `$id` twice", () => {
    const ids = [...JSON.stringify(doc).matchAll(/"\$id":"([^"]*)"/g)].map((m) => m[1]!)
    expect(ids.filter((id, i) => ids.indexOf(id) !== i)).toEqual([])
  })

  it("has a realistic example of every request body and 200 answer, each decoded by its endpoint's schemas", () => {
    const missing: string[] = []
    for (const { method, path, op } of operations) {
      const body = (op as any).requestBody?.content?.["application/json"]
      if (body !== undefined && body.example === undefined) missing.push(`${method} ${path} request`)
      if ((op.responses?.["200"]?.content?.["application/json"] as any)?.example === undefined) missing.push(`${method} ${path} 200`)
    }
    expect(missing).toEqual([])
    // The examples are the contract's shapes, with no field the schemas lack.
    const strict = { onExcessProperty: "error", errors: "all" } as const
    const wrong: string[] = []
    for (const group of Object.values(Api.groups) as ReadonlyArray<any>) {
      for (const endpoint of Object.values(group.endpoints) as ReadonlyArray<any>) {
        const id = `${group.identifier}.${endpoint.name}`
        const example = EXAMPLES[id]
        if (example === undefined) {
          wrong.push(`${id}: no example`)
          continue
        }
        if (Either.isLeft(Schema.decodeUnknownEither(endpoint.successSchema)(example.response, strict))) wrong.push(`${id}: answer`)
        if (Option.isSome(endpoint.payloadSchema) && example.request !== undefined && Either.isLeft(Schema.decodeUnknownEither(endpoint.payloadSchema.value)(example.request, strict))) {
          wrong.push(`${id}: request`)
        }
      }
    }
    expect(wrong).toEqual([])
    // The check can fail: a field the answer's schema lacks is refused.
    const call = (Api.groups as any).store.endpoints.callTool
    expect(Either.isLeft(Schema.decodeUnknownEither(call.successSchema)({ ...(EXAMPLES["store.callTool"]!.response as object), extra: 1 }, strict))).toBe(true)
    // Every error answer has its status's example, which its error class decodes.
    const classes = [E.BadRequest, E.Unauthorized, E.Forbidden, E.NotFound, E.MethodNotAllowed, E.Conflict, E.WaitTimeout, E.PayloadTooLarge, E.UnsupportedMediaType, E.TooMany, E.InternalError, E.BadGateway, E.Unavailable, E.GatewayTimeout]
    const byStatus = new Map(classes.map((cls) => [String(HttpApiSchema.getStatusError(cls)), cls as unknown as Schema.Schema<unknown, unknown>]))
    for (const { method, path, op } of operations) {
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        if (Number(status) < 400) continue
        const ref: string | undefined = (response.content?.["application/json"] as any)?.examples?.[`Error${status}`]?.$ref
        const example = ref === undefined ? undefined : (doc as any).components.examples[ref.replace("#/components/examples/", "")]?.value
        if (example === undefined) wrong.push(`${method} ${path} ${status}: no example`)
        else if (Either.isLeft(Schema.decodeUnknownEither(Schema.encodedSchema(byStatus.get(status)!))(example, strict))) wrong.push(`${method} ${path} ${status}: example`)
      }
    }
    // examples.json itself: an example of each error status the contract has, which its class decodes,
    // and none of an operation the contract no longer has.
    for (const status of byStatus.keys()) if (ERROR_EXAMPLES[status] === undefined) wrong.push(`error ${status}: no example`)
    for (const [status, example] of Object.entries(ERROR_EXAMPLES)) {
      const cls = byStatus.get(status)
      if (cls === undefined || Either.isLeft(Schema.decodeUnknownEither(Schema.encodedSchema(cls))(example, strict))) wrong.push(`error ${status}: examples.json`)
    }
    const contract = new Set(routeTable().map((r) => `${r.group}.${r.name}`))
    for (const id of Object.keys(EXAMPLES)) if (!contract.has(id)) wrong.push(`${id}: not an operation`)
    expect([...new Set(wrong.map((w) => w.replace(/^\S+ \S+ /, "")))]).toEqual([])
    // The call's example is the demo server's add.
    expect(bodyExample("post", "/for_store/call_tool")).toEqual({ tool_name: "demo__add", args: { a: 2, b: 3 } })
  })

  const bodyExample = (method: string, path: string) => (doc.paths[path]?.[method] as any)?.requestBody?.content?.["application/json"]?.example

  it("describes the routes beside the contract, with which need no key", () => {
    expect(EXTRA_DOCS.map((r) => `${r.method} ${r.path}`).sort()).toEqual(EXTRA_ROUTES.map((r) => `${r.method} ${r.path}`).sort())
    const description = (doc as any).info.description as string
    for (const r of EXTRA_DOCS) expect(description, r.path).toContain(`| ${r.method} \`${toOpenApiPath(r.path)}\` |`)
    expect(description).toMatch(/\| GET `\/docs` \| text\/html \| no \|/)
    expect(description).toMatch(/\| GET `\/metrics` \| text\/plain \| yes \|/)
  })

  it("GET /docs is an HTML page that loads nothing from another host", async () => {
    const reply = await server.get("/docs")
    expect(reply.status).toBe(200)
    expect(reply.headers.get("content-type") ?? "").toMatch(/text\/html/)
    const html = reply.text
    expect(html).toMatch(/<html/i)
    const external = (url: string) => /^(https?:)?\/\//i.test(url) && !url.startsWith(server.url)
    const loads: string[] = []
    // Scripts, stylesheets, images and frames: every URL the browser would fetch by itself.
    for (const m of html.matchAll(/<(script|link|img|iframe|source|embed|object)\b[^>]*?\b(src|href|data)\s*=\s*["']?([^"'\s>]+)/gi)) {
      if (external(m[3]!)) loads.push(`<${m[1]} ${m[2]}=${m[3]}>`)
    }
    for (const m of html.matchAll(/@import\s+(?:url\()?["']?([^"')\s;]+)/gi)) if (external(m[1]!)) loads.push(`@import ${m[1]}`)
    for (const m of html.matchAll(/url\(\s*["']?((?:https?:)?\/\/[^"')\s]+)/gi)) if (external(m[1]!)) loads.push(`url(${m[1]})`)
    expect(loads, "the contract requires docs that work offline: these come from a CDN or another host").toEqual([])
    // The page's code is in the page itself (or served by this server).
    expect(html).toMatch(/<script\b/i)
  })
  // Last: both tools work synchronously for seconds, and a request after that may meet a keep-alive
  // connection the server is closing just then (the server runs in this process).
  it("is valid for @apidevtools/swagger-parser", async () => {
    // validate() dereferences the document it is given: a copy.
    await expect(SwaggerParser.validate(structuredClone(doc) as never)).resolves.toBeTypeOf("object")
  })

  it("generates TypeScript types with openapi-typescript: every path and operation", async () => {
    const source = astToString(await openapiTS(structuredClone(doc) as never))
    for (const path of Object.keys(doc.paths)) expect(source, path).toContain(`"${path}": {`)
    for (const { op } of operations) expect(source, op.operationId).toContain(`"${op.operationId}": {`)
    // The call's payload and answer are typed, not `unknown`.
    expect(source).toMatch(/tool_name: components\["schemas"\]\["ToolName"\]/)
    expect(source).toMatch(/is_error: boolean/)
  })
})

describe("with an API key: the docs page and the document", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer({ services: { mcpServers: {} }, apiKey: "docs-key" })
  })
  afterAll(async () => {
    await server?.cleanup()
  })

  it("are served without the key; the page has the Authorize button's scheme; the API still needs the key", async () => {
    const page = await server.get("/docs")
    expect(page.status).toBe(200)
    expect(page.text).toMatch(/<html/i)
    // The page carries the document, whose bearer scheme Swagger UI shows as Authorize.
    expect(page.text).toContain('"securitySchemes":{"bearer":{')
    const document = await server.get("/openapi.json")
    expect(document.status).toBe(200)
    expect(document.body.components.securitySchemes.bearer).toMatchObject({ type: "http", scheme: "bearer" })
    expect(document.body.security).toEqual([{ bearer: [] }])
    expect((await server.get("/for_store/list_services")).status).toBe(401)
    expect((await server.get("/docs/")).status).toBe(401)
  })

  it("still go through the request guard (Host, Origin)", async () => {
    for (const path of ["/docs", "/openapi.json"]) {
      expect((await rawRequest(server.url + path, "GET", undefined, { host: "evil.example" })).status, path).toBe(403)
      expect((await rawRequest(server.url + path, "GET", undefined, { origin: "https://evil.example" })).status, path).toBe(403)
    }
  })
})
