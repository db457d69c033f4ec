// Resources, resource templates, prompts and completion through the store, against the protocol's
// reference server (server-everything over stdio and Streamable HTTP): listed on /mcp with the
// store's names, read (a listed resource, a templated one, a tool's resource_link), a prompt with
// arguments, completion, a subscription update reaching an SDK client, list_changed when a
// service goes, another scope's resource not found, and a URI exposed by two services prefixed
// reversibly; the library API (ScopeApi) gives the same.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { ResourceListChangedNotificationSchema, ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startEverythingHttp, type EverythingHttp } from "../fixtures/everything-http.js"
import { startHttpFixture } from "../fixtures/http-fixture.js"
import { everythingStdio } from "../fixtures/paths.js"
import { addService, localService, startTestServer, within, type TestServer } from "../support/index.js"

let server: TestServer
let http: EverythingHttp
const clients: Client[] = []

beforeAll(async () => {
  http = await startEverythingHttp("streamableHttp")
  server = await startTestServer()
  await addService(server, "/for_store", localService("ev", everythingStdio))
  await addService(server, "/for_store", { name: "evh", url: http.url })
  await addService(server, "/for_agent/agent-1", localService("solo", everythingStdio))
}, 60_000)

afterAll(async () => {
  await Promise.all(clients.splice(0).map((c) => within(c.close(), 3000, "client close").catch(() => undefined)))
  await server?.cleanup()
  await http?.stop()
})

const connect = async (path: string) => {
  const client = new Client({ name: "resources-test", version: "1.0.0" })
  client.onerror = () => undefined
  clients.push(client)
  await within(client.connect(new StreamableHTTPClientTransport(new URL(server.url + path))), 10_000, `connect ${path}`)
  return client
}

describe("resources and prompts on /mcp", () => {
  it("advertises what the scope's services offer, and lists them with the store's names", async () => {
    const client = await connect("/mcp")
    const caps = client.getServerCapabilities()
    expect(caps?.resources).toMatchObject({ listChanged: true, subscribe: true })
    expect(caps?.prompts).toMatchObject({ listChanged: true })
    expect(caps?.completions).toBeDefined()

    const { resources } = await client.listResources()
    // Both services list the same static documents: each copy is prefixed with its service.
    const ev = resources.filter((r) => r.uri.startsWith("mcp-store://ev/"))
    const evh = resources.filter((r) => r.uri.startsWith("mcp-store://evh/"))
    expect(ev.length).toBeGreaterThan(0)
    expect(ev.map((r) => r.uri.slice("mcp-store://ev/".length)).sort()).toEqual(evh.map((r) => r.uri.slice("mcp-store://evh/".length)).sort())
    expect(ev[0]!.uri.slice("mcp-store://ev/".length)).toMatch(/^demo:\/\/resource\/static\//)

    const { resourceTemplates } = await client.listResourceTemplates()
    expect(resourceTemplates.map((t) => t.uriTemplate)).toContain("mcp-store://ev/demo://resource/dynamic/text/{resourceId}")

    const { prompts } = await client.listPrompts()
    const names = prompts.map((p) => p.name)
    expect(names).toEqual(expect.arrayContaining(["ev__simple-prompt", "ev__args-prompt", "evh__args-prompt", "ev__completable-prompt"]))
    expect(prompts.find((p) => p.name === "ev__args-prompt")?.arguments?.map((a) => a.name)).toEqual(["city", "state"])
  })

  it("reads a listed resource (prefixed), a templated one and a tool's resource_link; 'not found' for others", async () => {
    const client = await connect("/mcp")
    const listed = (await client.listResources()).resources.find((r) => r.uri.startsWith("mcp-store://evh/"))!
    const read = await client.readResource({ uri: listed.uri })
    expect(read.contents[0]?.uri).toBe(listed.uri.slice("mcp-store://evh/".length))
    expect(typeof (read.contents[0] as { text?: string }).text).toBe("string")

    const templated = await client.readResource({ uri: "mcp-store://ev/demo://resource/dynamic/text/7" })
    expect((templated.contents[0] as { text: string }).text).toContain("7")

    // A tool's resource_link, read through the store by the URI the tool gave.
    const links = await client.callTool({ name: "ev__get-resource-links", arguments: { count: 1 } })
    const link = (links.content as Array<{ type: string; uri?: string }>).find((c) => c.type === "resource_link")
    expect(link?.uri).toBeDefined()
    // Both services have that template: the raw URI is ambiguous, the prefixed form reads it.
    await expect(client.readResource({ uri: link!.uri! })).rejects.toThrow(/several services/)
    const viaLink = await client.readResource({ uri: `mcp-store://ev/${link!.uri!}` })
    expect(viaLink.contents[0]?.uri).toBe(link!.uri)

    await expect(client.readResource({ uri: "mcp-store://nope/demo://resource/static/x" })).rejects.toThrow(/not found/)
  })

  it("gets a prompt with arguments and completes an argument, routed to the owning service", async () => {
    const client = await connect("/mcp")
    const prompt = await client.getPrompt({ name: "ev__args-prompt", arguments: { city: "Lyon", state: "Rhône" } })
    expect(JSON.stringify(prompt.messages)).toContain("Lyon")
    await expect(client.getPrompt({ name: "ev__no-such-prompt" })).rejects.toThrow(/not found/)

    const done = await client.complete({ ref: { type: "ref/prompt", name: "ev__completable-prompt" }, argument: { name: "department", value: "En" } })
    expect(done.completion.values).toEqual(["Engineering"])
  })

  it("an agent's session sees its own resources only; another scope's are not found", async () => {
    const client = await connect("/for_agent/agent-1/mcp")
    const { resources } = await client.listResources()
    // One service in this scope: no prefix.
    expect(resources.every((r) => r.uri.startsWith("demo://"))).toBe(true)
    expect((await client.listPrompts()).prompts.every((p) => p.name.startsWith("solo__"))).toBe(true)
    await expect(client.readResource({ uri: "mcp-store://ev/demo://resource/dynamic/text/1" })).rejects.toThrow(/not found/)
    await expect(client.getPrompt({ name: "ev__simple-prompt" })).rejects.toThrow(/not found/)
    // The one resource-offering service of the scope serves an unlisted URI.
    const dynamic = await client.readResource({ uri: "demo://resource/dynamic/text/3" })
    expect(dynamic.contents[0]?.uri).toBe("demo://resource/dynamic/text/3")
  })

  it("relays notifications/resources/updated to the subscribing session", async () => {
    const client = await connect("/for_agent/agent-1/mcp")
    const uri = "demo://resource/dynamic/text/1"
    const updated = new Promise<string>((resolve) => client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => resolve(n.params.uri)))
    await client.subscribeResource({ uri })
    // server-everything sends updates for subscribed URIs once the tool turns them on (its own session: the store's connection).
    await client.callTool({ name: "solo__toggle-subscriber-updates", arguments: {} })
    expect(await within(updated, 15_000, "resources/updated")).toBe(uri)
    await client.unsubscribeResource({ uri })
    await client.callTool({ name: "solo__toggle-subscriber-updates", arguments: {} })
  })

  it("sends resources/list_changed when a service leaves the scope", async () => {
    await addService(server, "/for_agent/agent-2", localService("one", everythingStdio))
    await addService(server, "/for_agent/agent-2", localService("two", everythingStdio))
    const client = await connect("/for_agent/agent-2/mcp")
    const before = (await client.listResources()).resources
    expect(before.some((r) => r.uri.startsWith("mcp-store://two/"))).toBe(true)
    const changed = new Promise<void>((resolve) => client.setNotificationHandler(ResourceListChangedNotificationSchema, () => resolve()))
    const reply = await server.del("/for_agent/agent-2/delete_service/two")
    expect(reply.status).toBe(200)
    await within(changed, 10_000, "resources/list_changed")
    const after = (await client.listResources()).resources
    // The collision is gone: the remaining service's URIs are unprefixed again.
    expect(after.length).toBeGreaterThan(0)
    expect(after.every((r) => r.uri.startsWith("demo://"))).toBe(true)
  })
})

describe("the library API", () => {
  it("lists, reads and gets prompts through ScopeApi; unknown names fail with the store's errors", async () => {
    const api = server.running.store.forStore()
    expect(api.listResources("ev").every((r) => r.service_name === "ev" && r.uri === `mcp-store://ev/${r.original_uri}`)).toBe(true)
    expect(api.listPrompts("evh").map((p) => p.original_name)).toContain("simple-prompt")
    expect(api.listResourceTemplates().length).toBeGreaterThan(0)
    const read = await api.readResource("mcp-store://evh/demo://resource/dynamic/text/2")
    expect(read.contents[0]?.uri).toBe("demo://resource/dynamic/text/2")
    const prompt = await api.getPrompt("evh__simple-prompt")
    expect(prompt.messages.length).toBeGreaterThan(0)
    await expect(api.readResource("mcp-store://zzz/x")).rejects.toMatchObject({ _tag: "ResourceNotFound" })
    await expect(api.getPrompt("ev__nope")).rejects.toMatchObject({ _tag: "PromptNotFound" })
    await expect(api.readResource("")).rejects.toMatchObject({ _tag: "ValidationError" })
    expect(() => api.listResources("nope")).toThrow(/not found/)
  })
})

describe("an upstream URI in the store's own scheme", () => {
  it("is shown prefixed with its service, so it reads from that service and names no other", async () => {
    const [a, b] = await Promise.all([startHttpFixture({ server: { catalog: true, foreignResourceUri: "mcp-store://b/secret" } }), startHttpFixture({ server: { catalog: true } })])
    try {
      await addService(server, "/for_agent/agent-2", { name: "a", url: a.url })
      await addService(server, "/for_agent/agent-2", { name: "b", url: b.url })
      const listed = await server.get("/for_agent/agent-2/list_resources?service_name=a")
      expect(listed.status, listed.text).toBe(200)
      const foreign = (listed.body.resources as Array<{ uri: string; original_uri: string }>).find((r) => r.original_uri === "mcp-store://b/secret")
      expect(foreign?.uri).toBe("mcp-store://a/mcp-store://b/secret")
      const read = await server.post("/for_agent/agent-2/read_resource", { uri: foreign!.uri })
      expect(read.status, read.text).toBe(200)
      expect(read.body).toMatchObject({ service_name: "a", contents: [{ text: "foreign resource" }] })
    } finally {
      await Promise.all([a.stop(), b.stop()])
    }
  })
})

describe("the REST routes, both scopes", () => {
  it("list, read and get in the contract's envelope; service_name filters", async () => {
    const resources = await server.get("/for_store/list_resources?service_name=evh")
    expect(resources.status).toBe(200)
    expect(resources.body.success).toBe(true)
    expect(resources.body.resources.length).toBeGreaterThan(0)
    expect(resources.body.resources.every((r: { service_name: string }) => r.service_name === "evh")).toBe(true)
    const templates = await server.get("/for_agent/agent-1/list_resource_templates")
    expect(templates.body.resource_templates.map((t: { uriTemplate: string }) => t.uriTemplate)).toContain("demo://resource/dynamic/text/{resourceId}")
    const prompts = await server.get("/for_store/list_prompts")
    expect(prompts.body.prompts.map((p: { name: string }) => p.name)).toContain("evh__args-prompt")

    const read = await server.post("/for_agent/agent-1/read_resource", { uri: "demo://resource/dynamic/text/5" })
    expect(read.status).toBe(200)
    expect(read.body).toMatchObject({ success: true, uri: "demo://resource/dynamic/text/5", service_name: "solo" })
    expect(read.body.contents[0].uri).toBe("demo://resource/dynamic/text/5")

    const prompt = await server.post("/for_store/get_prompt", { name: "evh__args-prompt", arguments: { city: "Lyon" } })
    expect(prompt.status).toBe(200)
    expect(prompt.body).toMatchObject({ success: true, service_name: "evh" })
    expect(JSON.stringify(prompt.body.messages)).toContain("Lyon")
  })

  it("another scope's resource or prompt is 404; bad input is 400 and changes nothing", async () => {
    const other = await server.post("/for_agent/agent-1/read_resource", { uri: "mcp-store://ev/demo://resource/dynamic/text/1" })
    expect(other.status).toBe(404)
    expect(other.body.error.code).toBe("RESOURCE_NOT_FOUND")
    const otherPrompt = await server.post("/for_agent/agent-1/get_prompt", { name: "ev__simple-prompt" })
    expect(otherPrompt.status).toBe(404)
    expect(otherPrompt.body.error.code).toBe("PROMPT_NOT_FOUND")
    expect((await server.get("/for_store/list_prompts?service_name=nope")).body.error.code).toBe("SERVICE_NOT_FOUND")

    for (const [path, body] of [
      ["/for_store/read_resource", {}],
      ["/for_store/read_resource", { uri: "" }],
      ["/for_store/read_resource", { uri: "x".repeat(9000) }],
      ["/for_store/read_resource", { uri: "demo://x", extra: 1 }],
      ["/for_store/get_prompt", { name: "evh__args-prompt", arguments: { city: 5 } }],
      ["/for_store/get_prompt", { arguments: {} }]
    ] as const) {
      const reply = await server.post(path, body)
      expect(reply.status, `${path} ${JSON.stringify(body).slice(0, 80)}`).toBe(400)
      expect(reply.body.error.code).toBe("VALIDATION_ERROR")
    }
    // A prompt the upstream refuses for a missing required argument: the caller's mistake, 400.
    const missing = await server.post("/for_store/get_prompt", { name: "evh__args-prompt", arguments: {} })
    expect(missing.status).toBe(400)
  })
})

it("get_service_info counts a service's resources, templates and prompts", async () => {
  const info = await server.get("/for_store/get_service_info?name=ev")
  expect(info.status).toBe(200)
  expect(info.body.catalog.resources).toBeGreaterThan(0)
  expect(info.body.catalog.resource_templates).toBe(2)
  expect(info.body.catalog.prompts).toBeGreaterThanOrEqual(4)
})

it("a read follows its scope as it changes: a service that leaves and comes back, one added and removed", async () => {
  // The scope's URI index is kept between reads and rebuilt when a service's catalog or state changes.
  const uri = "demo://resource/dynamic/text/9"
  const read = (scope: string) => server.post(`${scope}/read_resource`, { uri })
  const both = await read("/for_store")
  expect(both.status).toBe(404)
  expect(both.body.error.message).toMatch(/several services/)
  expect((await server.post("/for_store/disconnect_service", { service_name: "evh" })).body.status).toBe("disconnected")
  const alone = await read("/for_store")
  expect(alone.status).toBe(200)
  expect(alone.body.service_name).toBe("ev")
  expect((await server.post("/for_store/restart_service", { service_name: "evh" })).status).toBe(200)
  const healthy = await server.post("/for_store/wait_service", { client_id_or_service_name: "evh", status: "healthy", timeout: 30 })
  expect(healthy.body.data.result).toBe(true)
  expect((await read("/for_store")).body.error.message).toMatch(/several services/)

  expect((await read("/for_agent/agent-1")).body.service_name).toBe("solo")
  await addService(server, "/for_agent/agent-1", localService("solo2", everythingStdio))
  expect((await read("/for_agent/agent-1")).body.error.message).toMatch(/several services/)
  expect((await server.del("/for_agent/agent-1/delete_service/solo2")).status).toBe(200)
  const again = await read("/for_agent/agent-1")
  expect(again.status).toBe(200)
  expect(again.body.service_name).toBe("solo")
}, 60_000)
