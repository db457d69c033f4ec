// The store as an OAuth protected resource, over real HTTP, with a real OpenID provider
// (test/fixtures/oidc-issuer.ts) as --auth-issuer: the protected resource metadata of the store, of
// /mcp and of an agent's /mcp; 401 challenges that point at it; tokens for this store (admin, agent
// with a tools list) on REST and on the MCP endpoints, with the SDK v2 client (a bearer token it is
// given, and its own client_credentials flow from the 401 on); tokens for another resource, of
// another issuer, badly signed, without a role or without the scope refused; API keys beside tokens;
// the client's token never sent upstream (the upstream needs its own credential); opaque tokens of
// an issuer that introspects them, on REST and /mcp, and a made-up one refused.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Client, ClientCredentialsProvider, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { generateKeyPair, SignJWT } from "jose"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { startOidcIssuer, type IssuerClient, type OidcIssuer } from "../fixtures/oidc-issuer.js"
import { addService, api, authedApi, rawRequest, startTestServer, within, type Api, type TestServer } from "../support/index.js"

const A = "agent-a"
const B = "agent-b"
const ADMIN_KEY = "oauth-resource-test-admin-key-0123456789"
const UPSTREAM_SECRET = "Bearer upstream-own-credential"

const CLIENTS = {
  admin: { id: "admin-client", secret: "admin-secret-0123456789abcdef", claims: { role: "admin" } },
  agentA: { id: "agent-a-client", secret: "agent-a-secret-0123456789abcdef", claims: { role: "agent", agent_id: A, tools: ["up__echo"] } },
  otherAdmin: { id: "other-admin-client", secret: "other-admin-secret-0123456789abcdef", claims: { role: "admin" } },
  noRole: { id: "no-role-client", secret: "no-role-secret-0123456789abcdef", claims: {} }
} satisfies Record<string, IssuerClient>

/** A connected SDK v2 client of `url` (a bearer token given, or its own OAuth provider). */
const connect = async (url: string, auth: { readonly token: string } | { readonly provider: ClientCredentialsProvider }) => {
  const client = new Client({ name: "oauth-resource-test", version: "1.0.0" })
  client.onerror = () => undefined
  const transport =
    "token" in auth
      ? new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${auth.token}` } } })
      : new StreamableHTTPClientTransport(new URL(url), { authProvider: auth.provider })
  await within(client.connect(transport), 10_000, `connect ${url}`)
  return client
}

const names = (tools: ReadonlyArray<{ name: string }>) => tools.map((t) => t.name).sort()

describe("the store as an OAuth protected resource (--auth-issuer)", () => {
  let issuer: OidcIssuer
  let upstream: HttpFixture
  let server: TestServer
  let anonymous: Api
  let base: string
  const clients: Client[] = []
  /** Access tokens by name, obtained from the provider in beforeAll. */
  const tokens = {} as Record<"admin" | "adminMcp" | "agentA" | "agentAStore" | "agentB" | "otherResource" | "noRole" | "toolsOnly", string>

  beforeAll(async () => {
    ;[issuer, upstream] = await Promise.all([startOidcIssuer(Object.values(CLIENTS)), startHttpFixture({ requiredHeaders: { authorization: UPSTREAM_SECRET } })])
    server = await startTestServer({ apiKey: ADMIN_KEY, options: { auth_issuer: issuer.issuer } })
    base = server.url
    anonymous = api(base)
    const admin = authedApi(base, ADMIN_KEY)
    const up = { name: "up", url: upstream.url, headers: { authorization: UPSTREAM_SECRET } }
    const [t] = await Promise.all([
      Promise.all([
        issuer.token(CLIENTS.admin, base),
        issuer.token(CLIENTS.admin, `${base}/mcp`),
        issuer.token(CLIENTS.agentA, `${base}/for_agent/${A}/mcp`, "mcp-store:tools"),
        issuer.token(CLIENTS.agentA, base),
        issuer.token(CLIENTS.agentA, `${base}/for_agent/${B}/mcp`),
        issuer.token(CLIENTS.admin, "https://elsewhere.example/mcp"),
        issuer.token(CLIENTS.noRole, base),
        issuer.token(CLIENTS.admin, base, "mcp-store:tools")
      ]),
      addService(admin, "/for_store", up),
      addService(admin, `/for_agent/${A}`, up)
    ])
    ;[tokens.admin, tokens.adminMcp, tokens.agentA, tokens.agentAStore, tokens.agentB, tokens.otherResource, tokens.noRole, tokens.toolsOnly] = t
  }, 60_000)
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)))
    await server?.cleanup()
    await Promise.all([issuer?.close(), upstream?.stop()])
  })

  it("serves the protected resource metadata of the store, of /mcp and of an agent's /mcp, to anyone", async () => {
    for (const [path, resource] of [
      ["/.well-known/oauth-protected-resource", base],
      ["/.well-known/oauth-protected-resource/mcp", `${base}/mcp`],
      [`/.well-known/oauth-protected-resource/for_agent/${A}/mcp`, `${base}/for_agent/${A}/mcp`]
    ] as const) {
      const r = await anonymous.get(path)
      expect(r.status, r.text).toBe(200)
      expect(r.body).toEqual({
        resource,
        authorization_servers: [issuer.issuer],
        scopes_supported: ["mcp-store:tools", "mcp-store:read", "mcp-store:admin"],
        bearer_methods_supported: ["header"],
        resource_name: expect.any(String)
      })
    }
    const bad = await anonymous.get("/.well-known/oauth-protected-resource/for_agent/bad%20id/mcp")
    expect(bad.status, bad.text).toBe(400)
    expect(bad.body.error.code).toBe("VALIDATION_ERROR")
  })

  it("answers a request without credentials 401 with a challenge naming the metadata and the scope", async () => {
    const mcp = await anonymous.post("/mcp", { jsonrpc: "2.0", id: 1, method: "ping" })
    expect(mcp.status).toBe(401)
    expect(mcp.body.error.code).toBe("UNAUTHORIZED")
    expect(mcp.headers.get("www-authenticate")).toBe(`Bearer realm="mcp-store", resource_metadata="${base}/.well-known/oauth-protected-resource/mcp", scope="mcp-store:tools"`)
    const rest = await anonymous.post("/for_store/add_service", { name: "x", url: "http://127.0.0.1:1/mcp" })
    expect(rest.status).toBe(401)
    expect(rest.headers.get("www-authenticate")).toBe(`Bearer realm="mcp-store", resource_metadata="${base}/.well-known/oauth-protected-resource", scope="mcp-store:admin"`)
  })

  it("takes an admin token for the store on REST and on /mcp, and a token for /mcp on /mcp only", async () => {
    const rest = await authedApi(base, tokens.admin).get("/for_store/list_services")
    expect(rest.status, rest.text).toBe(200)
    expect(rest.body.services.map((s: { name: string }) => s.name)).toEqual(["up"])
    const viaStoreToken = await connect(`${base}/mcp`, { token: tokens.admin })
    clients.push(viaStoreToken)
    const viaMcpToken = await connect(`${base}/mcp`, { token: tokens.adminMcp })
    clients.push(viaMcpToken)
    expect(names((await viaMcpToken.listTools()).tools)).toContain("up__echo")
    // The /mcp token is for /mcp: not for the REST API.
    const elsewhere = await authedApi(base, tokens.adminMcp).get("/for_store/list_services")
    expect(elsewhere.status).toBe(401)
    expect(elsewhere.headers.get("www-authenticate")).toContain('error="invalid_token"')
  })

  it("gives an agent token its agent's endpoint and its tools list, and calls reach the upstream with the upstream's own credential", async () => {
    const client = await connect(`${base}/for_agent/${A}/mcp`, { token: tokens.agentA })
    clients.push(client)
    expect(names((await client.listTools()).tools)).toEqual(["up__echo"])
    const result = await client.callTool({ name: "up__echo", arguments: { text: "through the token" } })
    expect(result.isError ?? false).toBe(false)
    expect((result.content as Array<{ text: string }>)[0]!.text).toBe("through the token")
    // The upstream took every call (it answers 401 to any other Authorization than its own).
    expect(upstream.requests()).toContain("POST tools/call")
    // A tool outside the token's list is refused as a key's would be.
    const outside = await authedApi(base, tokens.agentAStore).post(`/for_agent/${A}/call_tool`, { tool_name: "up__add", args: { a: 1, b: 2 } })
    expect(outside.status, outside.text).toBe(403)
    expect(outside.body.error.code).toBe("TOOL_NOT_ALLOWED")
  })

  it("refuses a token for another resource, another agent's endpoint, or another store, with invalid_token", async () => {
    for (const [token, path] of [
      [tokens.agentA, "/mcp"],
      [tokens.agentB, `/for_agent/${A}/mcp`],
      [tokens.otherResource, "/mcp"]
    ] as const) {
      const r = await authedApi(base, token).post(path, { jsonrpc: "2.0", id: 1, method: "ping" })
      expect(r.status, `${path}: ${r.text}`).toBe(401)
      expect(r.body.error.message).toMatch(/another resource/)
      expect(r.headers.get("www-authenticate")).toMatch(/^Bearer realm="mcp-store", error="invalid_token", error_description="[^"]+", resource_metadata="/)
    }
    // An agent's token for the store reaches its own agent's routes only (its role, as a key's).
    const other = await authedApi(base, tokens.agentAStore).get(`/for_agent/${B}/list_tools`)
    expect(other.status).toBe(403)
    expect(other.body.error.code).toBe("FORBIDDEN")
  })

  it("refuses a token of an issuer it does not trust, a forged signature, and a token whose claims name no role", async () => {
    const { privateKey } = await generateKeyPair("ES256")
    const forge = (iss: string) =>
      new SignJWT({ role: "admin", scope: "mcp-store:admin" }).setProtectedHeader({ alg: "ES256", kid: "key-1" }).setIssuer(iss).setAudience(base).setExpirationTime("5m").setIssuedAt().sign(privateKey)
    const [otherIssuer, forged] = await Promise.all([forge("https://other-issuer.example"), forge(issuer.issuer)])
    for (const [token, why] of [
      [otherIssuer, /issuer is not trusted/],
      [forged, /signature/],
      [tokens.noRole, /no role claim/]
    ] as const) {
      const r = await authedApi(base, token).get("/for_store/list_services")
      expect(r.status, r.text).toBe(401)
      expect(r.body.error.message).toMatch(why)
    }
  })

  it("answers a token without the route's scope 403 insufficient_scope, naming the scope", async () => {
    const read = await authedApi(base, tokens.toolsOnly).get("/for_store/list_services")
    expect(read.status, read.text).toBe(403)
    expect(read.body.error.code).toBe("FORBIDDEN")
    expect(read.body.error.message).toMatch(/^insufficient_scope/)
    expect(read.headers.get("www-authenticate")).toMatch(/error="insufficient_scope".*resource_metadata="[^"]+", scope="mcp-store:read"$/)
    // The same token has the scope of the MCP endpoint.
    const mcp = await connect(`${base}/mcp`, { token: tokens.toolsOnly })
    clients.push(mcp)
    expect(names((await mcp.listTools()).tools)).toContain("up__echo")
  })

  it("keeps an MCP session across a renewed token of the same subject, and refuses it to another subject", async () => {
    const post = (token: string, body: unknown, session?: string) =>
      fetch(`${base}/mcp`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${token}`,
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          ...(session === undefined ? {} : { "mcp-session-id": session, "mcp-protocol-version": "2025-06-18" })
        },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(10_000)
      })
    const opened = await post(tokens.adminMcp, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "renewing", version: "1.0.0" } } })
    expect(opened.status).toBe(200)
    await opened.text()
    const session = opened.headers.get("mcp-session-id")
    expect(session).toBeTypeOf("string")
    const renewed = await issuer.token(CLIENTS.admin, `${base}/mcp`)
    expect(renewed).not.toBe(tokens.adminMcp)
    const listed = await post(renewed, { jsonrpc: "2.0", id: 2, method: "tools/list" }, session!)
    expect(listed.status).toBe(200)
    expect(await listed.text()).toContain("up__echo")
    const stranger = await post(await issuer.token(CLIENTS.otherAdmin, `${base}/mcp`), { jsonrpc: "2.0", id: 3, method: "tools/list" }, session!)
    await stranger.text()
    expect(stranger.status).toBe(404)
  })

  it("keeps API keys working beside tokens, on REST and on /mcp", async () => {
    const rest = await authedApi(base, ADMIN_KEY).get("/for_store/list_services")
    expect(rest.status).toBe(200)
    const client = await connect(`${base}/mcp`, { token: ADMIN_KEY })
    clients.push(client)
    expect(names((await client.listTools()).tools)).toContain("up__echo")
    const wrong = await authedApi(base, "not-a-key").get("/for_store/list_services")
    expect(wrong.status).toBe(401)
  })

  it("builds resource URIs on --public-url (a proxy's prefix included), and needs a token even with no key at all", async () => {
    const proxied = await startTestServer({ options: { auth_issuer: issuer.issuer, public_url: "https://store.example.com/base/" } })
    try {
      const open = api(proxied.url)
      const meta = await open.get("/.well-known/oauth-protected-resource/base/mcp")
      expect(meta.status, meta.text).toBe(200)
      expect(meta.body.resource).toBe("https://store.example.com/base/mcp")
      expect((await open.get("/.well-known/oauth-protected-resource/base")).body.resource).toBe("https://store.example.com/base")
      // The public URL's name is the store's own: a proxy passes it on as the Host.
      const viaProxy = await rawRequest(`${proxied.url}/.well-known/oauth-protected-resource/base/mcp`, "GET", undefined, { host: "store.example.com" })
      expect(viaProxy.status, viaProxy.text).toBe(200)
      // No key at all, yet every route needs a token: the direct call route too.
      const call = await open.post("/for_store/call_tool", { tool_name: "x__y", args: {} })
      expect(call.status, call.text).toBe(401)
      const refused = await open.post("/mcp", { jsonrpc: "2.0", id: 1, method: "ping" })
      expect(refused.status).toBe(401)
      expect(refused.headers.get("www-authenticate")).toContain('resource_metadata="https://store.example.com/.well-known/oauth-protected-resource/base/mcp"')
      const token = await issuer.token(CLIENTS.admin, "https://store.example.com/base/mcp")
      const client = await connect(`${proxied.url}/mcp`, { token })
      clients.push(client)
      expect((await client.listTools()).tools).toEqual([])
      // A token for the other store is for another resource here.
      expect((await authedApi(proxied.url, tokens.admin).get("/for_store/list_services")).status).toBe(401)
    } finally {
      await Promise.all(clients.splice(0).map((c) => c.close().catch(() => undefined)))
      await proxied.cleanup()
    }
  })

  it("lets the SDK v2 client find the authorization server from the 401 and get its own token (client_credentials)", async () => {
    const provider = new ClientCredentialsProvider({ clientId: CLIENTS.agentA.id, clientSecret: CLIENTS.agentA.secret, scope: "mcp-store:tools", expectedIssuer: issuer.issuer })
    const client = await connect(`${base}/for_agent/${A}/mcp`, { provider })
    clients.push(client)
    expect(names((await client.listTools()).tools)).toEqual(["up__echo"])
    const tokens = await provider.tokens()
    expect(tokens?.access_token).toBeTypeOf("string")
  })
})

describe("opaque access tokens of an --auth-issuer that introspects them", () => {
  const STORE_CLIENT: IssuerClient = { id: "mcp-store-rs", secret: "store-rs-secret-0123456789abcdef", claims: {} }
  let issuer: OidcIssuer
  let upstream: HttpFixture
  let server: TestServer
  const clients: Client[] = []

  beforeAll(async () => {
    ;[issuer, upstream] = await Promise.all([startOidcIssuer([CLIENTS.admin, CLIENTS.agentA, STORE_CLIENT], 300, { opaque: true }), startHttpFixture()])
    server = await startTestServer({
      apiKey: ADMIN_KEY,
      options: { auth_issuer: issuer.issuer },
      server: { authIntrospection: { clientId: STORE_CLIENT.id, clientSecret: STORE_CLIENT.secret } }
    })
    await addService(authedApi(server.url, ADMIN_KEY), `/for_agent/${A}`, { name: "up", url: upstream.url })
  }, 60_000)
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)))
    await server?.cleanup()
    await Promise.all([issuer?.close(), upstream?.stop()])
  })

  it("takes them on REST and on an agent's /mcp, with the principal and scopes the issuer's answer gives", async () => {
    const admin = await issuer.token(CLIENTS.admin, server.url)
    expect(admin.split(".")).toHaveLength(1)
    const listed = await authedApi(server.url, admin).get(`/for_agent/${A}/list_services`)
    expect(listed.status, listed.text).toBe(200)
    expect(listed.body.services.map((s: { name: string }) => s.name)).toEqual(["up"])
    const agent = await issuer.token(CLIENTS.agentA, `${server.url}/for_agent/${A}/mcp`, "mcp-store:tools")
    const client = await connect(`${server.url}/for_agent/${A}/mcp`, { token: agent })
    clients.push(client)
    expect(names((await client.listTools()).tools)).toEqual(["up__echo"])
    // A tools-only grant does not reach the admin routes.
    const refused = await authedApi(server.url, await issuer.token(CLIENTS.admin, server.url, "mcp-store:tools")).post("/for_store/add_service", { name: "x", url: upstream.url })
    expect(refused.status, refused.text).toBe(403)
    expect(refused.headers.get("www-authenticate")).toContain('error="insufficient_scope"')
  })

  it("refuses a token the issuer does not know with invalid_token; a mistyped API key is still told it is one, unasked", async () => {
    const asked = issuer.fetches.introspection
    const madeUp = await authedApi(server.url, "an-opaque-token-nobody-issued-0123456789").get("/for_store/list_services")
    expect(madeUp.status).toBe(401)
    expect(madeUp.body.message).toMatch(/not active/)
    expect(madeUp.headers.get("www-authenticate")).toContain('error="invalid_token"')
    expect(issuer.fetches.introspection).toBe(asked + 1)
    const typo = await authedApi(server.url, `mcps_0123456789abcdef_${"x".repeat(43)}`).get("/for_store/list_services")
    expect(typo.status).toBe(401)
    expect(typo.body.message).toMatch(/Missing or wrong API key/)
    expect(issuer.fetches.introspection).toBe(asked + 1)
  })
})
