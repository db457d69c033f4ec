// The built-in authorization server (--auth-server, src/http/oauth-server/) end to end: the SDK v2
// client's own OAuth flow (metadata discovery, a client metadata document this test serves on
// loopback, PKCE, the consent the operator gives with the admin key, the code with `iss`, the token,
// a call on the agent's MCP endpoint with it, a refresh that rotates, the reuse of a rotated refresh
// token revoking its family, revocation); an approval ahead of time (admin route and CLI) that skips
// the page; client credentials with a printed secret and with private_key_jwt; Dynamic Client
// Registration; and what an attacker tries: another redirect URI, a code used twice or with the
// wrong verifier, client ids at a metadata address, over http elsewhere, or with an oversize or
// lying document, a token for another agent's endpoint, a consent decided without the admin key.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { auth, Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { exportJWK, generateKeyPair, jwtVerify, SignJWT } from "jose"
import { runOAuthClients } from "../../src/cli/oauth-clients-command.js"
import { configureLogging } from "../../src/logging/log.js"
import { addService, api, authedApi, fixtureService, MemoryOAuthProvider, startClientSite, startTestServer, within, type Api, type TestServer } from "../support/index.js"

const ADMIN = "admin-key-for-oauth-server-test"
const A = "agent-a"
const B = "agent-b"

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const json = (r: Response): Promise<any> => r.json()

const form = (fields: Record<string, string>) => ({ method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams(fields).toString() })

describe("the built-in authorization server", () => {
  let server: TestServer
  let admin: Api
  let site: Awaited<ReturnType<typeof startClientSite>>
  let resourceA: string
  let clientId: string
  let callback: string
  // Every log line of the file's store, and every secret the tests saw: none may be in a line.
  const lines: string[] = []
  const secrets: string[] = []
  let restoreLogging: () => void = () => undefined

  beforeAll(async () => {
    restoreLogging = configureLogging({ level: "info", write: (line) => void lines.push(line) })
    site = await startClientSite()
    site.docs.set("/huge.json", { client_id: "x", pad: "x".repeat(100_000) })
    server = await startTestServer({ apiKey: ADMIN, options: { auth_server: true, auth_dev_loopback_clients: true } })
    admin = authedApi(server.url, ADMIN)
    resourceA = `${server.url}/for_agent/${A}/mcp`
    clientId = `${site.base}/client.json`
    callback = `${site.base}/callback`
    site.docs.set("/client.json", { client_id: clientId, client_name: "Test <b>client</b>", redirect_uris: [callback] })
    await addService(admin, `/for_agent/${A}`, fixtureService("svc"))
  }, 60_000)

  afterAll(async () => {
    restoreLogging()
    await server?.cleanup()
    await site?.close()
  })

  /** The authorization URL the SDK makes (discovery, PKCE, resource), for `provider`. */
  const authorizationUrl = async (provider: MemoryOAuthProvider) => {
    expect(await auth(provider, { serverUrl: provider.resource })).toBe("REDIRECT")
    return provider.lastUrl as URL
  }

  /** The consent page's request id, from its inert JSON. */
  const consentOf = async (url: URL) => {
    const page = await fetch(url, { redirect: "manual" })
    expect(page.status).toBe(200)
    expect(page.headers.get("content-security-policy")).toContain("frame-ancestors 'none'")
    const html = await page.text()
    const json = /<script type="application\/json" id="consent-data">([^<]*)<\/script>/.exec(html)?.[1]
    return { html, view: JSON.parse(json as string) as { request_id: string; agent: string; client_id: string } }
  }

  it("advertises its endpoints, PKCE S256 only, iss in the response and client metadata documents", async () => {
    const meta = await json(await fetch(`${server.url}/.well-known/oauth-authorization-server`))
    expect(meta).toMatchObject({
      issuer: server.url,
      authorization_endpoint: `${server.url}/oauth/authorize`,
      token_endpoint: `${server.url}/oauth/token`,
      code_challenge_methods_supported: ["S256"],
      authorization_response_iss_parameter_supported: true,
      client_id_metadata_document_supported: true,
      registration_endpoint: `${server.url}/oauth/register`
    })
    const jwks = await json(await fetch(`${server.url}/oauth/jwks`))
    expect(jwks.keys).toHaveLength(1)
    expect(jwks.keys[0]).not.toHaveProperty("d")
  })

  it("SDK v2 client: consent with the admin key, code with iss, token, a call, refresh rotated, reuse revokes the family", { timeout: 30_000 }, async () => {
    const provider = new MemoryOAuthProvider(clientId, callback, resourceA)
    const url = await authorizationUrl(provider)
    expect(url.searchParams.get("code_challenge_method")).toBe("S256")
    expect(url.searchParams.get("resource")).toBe(resourceA)
    const { html, view } = await consentOf(url)
    expect(view.agent).toBe(A)
    expect(html).not.toContain("<b>client</b>")
    // The decision needs the admin key: without it 401, with a wrong id 404, and nothing is decided.
    const anonymous = await fetch(`${server.url}/oauth/consent`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ request_id: view.request_id, decision: "approve" }) })
    expect(anonymous.status).toBe(401)
    expect((await admin.post("/oauth/consent", { request_id: "nope", decision: "approve" })).status).toBe(404)
    expect((await admin.post("/oauth/consent", { request_id: view.request_id, decision: "maybe" })).status).toBe(400)
    const decided = await admin.post("/oauth/consent", { request_id: view.request_id, decision: "approve", tools: ["svc__echo"] })
    expect(decided.status, decided.text).toBe(200)
    const back = new URL(decided.body.location)
    expect(back.origin + back.pathname).toBe(callback)
    expect(back.searchParams.get("iss")).toBe(server.url)
    const code = back.searchParams.get("code") as string
    secrets.push(code)
    expect(await auth(provider, { serverUrl: resourceA, authorizationCode: code, iss: back.searchParams.get("iss") as string })).toBe("AUTHORIZED")
    const first = provider.saved!
    secrets.push(first.access_token, first.refresh_token!)
    expect(first.refresh_token).toBeTruthy()
    // The access token: ES256, iss the store, aud the agent's endpoint, bound to the agent and its tools.
    const jwks = await json(await fetch(`${server.url}/oauth/jwks`))
    const { createLocalJWKSet } = await import("jose")
    const { payload } = await jwtVerify(first.access_token, createLocalJWKSet(jwks), { issuer: server.url, audience: resourceA })
    expect(payload).toMatchObject({ client_id: clientId, role: "agent", agent_id: A, tools: ["svc__echo"], scope: "mcp-store:tools" })
    expect(payload.exp! - payload.iat!).toBe(600)
    // The code is used once: a second exchange fails and revokes what it gave.
    const again = await fetch(`${server.url}/oauth/token`, form({ grant_type: "authorization_code", code, code_verifier: provider.verifier, redirect_uri: callback, client_id: clientId }))
    expect(again.status).toBe(400)
    expect((await json(again)).error).toBe("invalid_grant")
    // ... so the flow is started again, now without the page: the client is approved for A.
    provider.saved = undefined
    const url2 = await authorizationUrl(provider)
    const direct = await fetch(url2, { redirect: "manual" })
    expect(direct.status).toBe(302)
    const back2 = new URL(direct.headers.get("location") as string)
    expect(back2.searchParams.get("state")).toBe(url2.searchParams.get("state"))
    expect(await auth(provider, { serverUrl: resourceA, authorizationCode: back2.searchParams.get("code") as string, iss: server.url })).toBe("AUTHORIZED")

    // A call with the token, through SDK v2's transport: its tools list is the approval's.
    const client = new Client({ name: "oauth-test", version: "1.0.0" })
    await within(client.connect(new StreamableHTTPClientTransport(new URL(resourceA), { authProvider: provider })), 10_000, "connect")
    try {
      const tools = await client.listTools()
      expect(tools.tools.map((t) => t.name)).toEqual(["svc__echo"])
      const echoed = await client.callTool({ name: "svc__echo", arguments: { text: "with a token" } })
      expect(JSON.stringify(echoed.content)).toContain("with a token")
    } finally {
      await client.close()
    }
    // The token reaches only its own audience: another agent's endpoint refuses it.
    const other = await fetch(`${server.url}/for_agent/${B}/mcp`, { method: "POST", headers: { authorization: `Bearer ${provider.saved!.access_token}`, "content-type": "application/json", accept: "application/json, text/event-stream" }, body: "{}" })
    expect(other.status).toBe(401)

    // Refresh: a new pair; the old refresh token, used again, revokes the family (the new access token included).
    const before = provider.saved!
    expect(await auth(provider, { serverUrl: resourceA })).toBe("AUTHORIZED")
    const after = provider.saved!
    secrets.push(after.access_token, after.refresh_token!)
    expect(after.refresh_token).not.toBe(before.refresh_token)
    const mcpStatus = async (token: string) =>
      (await fetch(resourceA, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25" }, body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "t", version: "1" } } }) })).status
    expect(await mcpStatus(after.access_token)).toBe(200)
    const reuse = await fetch(`${server.url}/oauth/token`, form({ grant_type: "refresh_token", refresh_token: before.refresh_token!, client_id: clientId }))
    expect(reuse.status).toBe(400)
    expect(await mcpStatus(after.access_token)).toBe(401)
    const rotated = await fetch(`${server.url}/oauth/token`, form({ grant_type: "refresh_token", refresh_token: after.refresh_token!, client_id: clientId }))
    expect((await json(rotated)).error).toBe("invalid_grant")
  })

  it("two refreshes racing with one token: one gets a new pair, and the family is revoked all the same", async () => {
    const provider = new MemoryOAuthProvider(clientId, callback, resourceA)
    const back = new URL((await fetch(await authorizationUrl(provider), { redirect: "manual" })).headers.get("location") as string)
    expect(await auth(provider, { serverUrl: resourceA, authorizationCode: back.searchParams.get("code") as string, iss: server.url })).toBe("AUTHORIZED")
    const refresh = provider.saved!.refresh_token!
    const answers = await Promise.all([1, 2].map(() => fetch(`${server.url}/oauth/token`, form({ grant_type: "refresh_token", refresh_token: refresh, client_id: clientId }))))
    expect(answers.map((a) => a.status).sort()).toEqual([200, 400])
    const won = await json(answers.find((a) => a.status === 200)!)
    const next = await fetch(`${server.url}/oauth/token`, form({ grant_type: "refresh_token", refresh_token: won.refresh_token, client_id: clientId }))
    expect((await json(next)).error).toBe("invalid_grant")
  })

  it("revocation: a revoked refresh token refreshes nothing; the file keeps only hashes", async () => {
    const provider = new MemoryOAuthProvider(clientId, callback, resourceA)
    const url = await authorizationUrl(provider)
    const back = new URL((await fetch(url, { redirect: "manual" })).headers.get("location") as string)
    expect(await auth(provider, { serverUrl: resourceA, authorizationCode: back.searchParams.get("code") as string, iss: server.url })).toBe("AUTHORIZED")
    const { refresh_token, access_token } = provider.saved!
    const revoked = await fetch(`${server.url}/oauth/revoke`, form({ token: refresh_token!, client_id: clientId }))
    expect(revoked.status).toBe(200)
    const refresh = await fetch(`${server.url}/oauth/token`, form({ grant_type: "refresh_token", refresh_token: refresh_token!, client_id: clientId }))
    expect((await json(refresh)).error).toBe("invalid_grant")
    const { readFileSync } = await import("node:fs")
    const text = readFileSync(`${server.file}.oauth-server.json`, "utf8")
    expect(text).not.toContain(refresh_token!)
    expect(text).not.toContain(access_token)
  })

  it("refuses another redirect URI (an error page, no redirect), no PKCE, a wrong verifier and a resource that is not an agent's endpoint", async () => {
    const provider = new MemoryOAuthProvider(clientId, callback, resourceA)
    const url = await authorizationUrl(provider)
    const evil = new URL(url)
    evil.searchParams.set("redirect_uri", "https://attacker.example/cb")
    const page = await fetch(evil, { redirect: "manual" })
    expect(page.status).toBe(400)
    expect(page.headers.get("location")).toBeNull()
    const noPkce = new URL(url)
    noPkce.searchParams.delete("code_challenge")
    const refused = new URL((await fetch(noPkce, { redirect: "manual" })).headers.get("location") as string)
    expect(refused.searchParams.get("error")).toBe("invalid_request")
    expect(refused.searchParams.get("iss")).toBe(server.url)
    const storeWide = new URL(url)
    storeWide.searchParams.set("resource", `${server.url}/mcp`)
    expect(new URL((await fetch(storeWide, { redirect: "manual" })).headers.get("location") as string).searchParams.get("error")).toBe("invalid_target")
    const back = new URL((await fetch(url, { redirect: "manual" })).headers.get("location") as string)
    const wrong = await fetch(`${server.url}/oauth/token`, form({ grant_type: "authorization_code", code: back.searchParams.get("code")!, code_verifier: "x".repeat(43), redirect_uri: callback, client_id: clientId }))
    expect((await json(wrong)).error).toBe("invalid_grant")
  })

  it("refuses client ids that point at a metadata address, at http elsewhere, or whose document is too large or names another id", async () => {
    const page = (id: string) =>
      fetch(`${server.url}/oauth/authorize?${new URLSearchParams({ client_id: id, redirect_uri: callback, response_type: "code", code_challenge: "a".repeat(43), code_challenge_method: "S256", resource: resourceA })}`, { redirect: "manual" })
    // https://169.254.169.254: a well-formed id, refused by the outbound policy before any connection.
    for (const id of ["https://169.254.169.254/latest/meta-data", "http://169.254.169.254/latest/meta-data", "http://example.com/client.json", `${site.base}/huge.json`, `${site.base}/`, `${site.base}/missing.json`]) {
      const answer = await page(id)
      expect(answer.status, id).toBe(400)
      expect(answer.headers.get("location"), id).toBeNull()
    }
    // The metadata address is refused by the outbound policy, before any connection; the oversize document by its limit.
    expect(await (await page("https://169.254.169.254/latest/meta-data")).text()).toMatch(/metadata address/)
    expect(await (await page(`${site.base}/huge.json`)).text()).toMatch(/not JSON of at most 16384 bytes|too large/)
    site.docs.set("/liar.json", { client_id: `${site.base}/other.json`, redirect_uris: [callback] })
    expect((await page(`${site.base}/liar.json`)).status).toBe(400)
  })

  it("an operator's approval ahead of time (CLI) completes the flow without the page; client credentials with the printed secret", async () => {
    const cliClient = `${site.base}/cli.json`
    site.docs.set("/cli.json", { client_id: cliClient, client_name: "approved by the CLI", redirect_uris: [callback] })
    expect(await runOAuthClients(["approve-client", cliClient, "--agent", A, "--config", server.file], {}, { writeOut: () => undefined, writeErr: () => undefined })).toBe(0)
    const provider = new MemoryOAuthProvider(cliClient, callback, resourceA)
    const straight = await fetch(await authorizationUrl(provider), { redirect: "manual" })
    expect(straight.status).toBe(302)
    expect(new URL(straight.headers.get("location") as string).searchParams.get("code")).toBeTruthy()
    const id = `${site.base}/machine.json`
    let out = ""
    const code = await runOAuthClients(["approve-client", id, "--agent", A, "--tools", "svc__*", "--machine", "--config", server.file], {}, { writeOut: (t) => void (out += t), writeErr: () => undefined })
    expect(code).toBe(0)
    const secret = out.trim()
    secrets.push(secret)
    expect(secret.length).toBeGreaterThan(40)
    const basic = `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`).toString("base64")}`
    const token = await fetch(`${server.url}/oauth/token`, { ...form({ grant_type: "client_credentials", resource: resourceA }), headers: { "content-type": "application/x-www-form-urlencoded", authorization: basic } })
    expect(token.status).toBe(200)
    const body = await json(token)
    expect(body.refresh_token).toBeUndefined()
    const wrong = await fetch(`${server.url}/oauth/token`, form({ grant_type: "client_credentials", client_id: id, client_secret: "nope" }))
    expect(wrong.status).toBe(401)
    // list-clients shows the approvals, never a secret; revoke-client withdraws one: no more tokens.
    let listed = ""
    expect(await runOAuthClients(["list-clients", "--config", server.file], {}, { writeOut: (t) => void (listed += t), writeErr: () => undefined })).toBe(0)
    expect(listed).toContain(id)
    expect(listed).toContain("machine (secret)")
    expect(listed).not.toContain(secret)
    expect(await runOAuthClients(["revoke-client", id, "--config", server.file], {}, { writeOut: () => undefined, writeErr: () => undefined })).toBe(0)
    const afterRevoke = await fetch(`${server.url}/oauth/token`, { ...form({ grant_type: "client_credentials", resource: resourceA }), headers: { "content-type": "application/x-www-form-urlencoded", authorization: basic } })
    expect(afterRevoke.status).toBe(401)
    expect(await runOAuthClients(["revoke-client", id, "--config", server.file], {}, { writeOut: () => undefined, writeErr: () => undefined })).toBe(2)
    // Bad input to the CLI: a usage error, nothing written.
    expect(await runOAuthClients(["approve-client", "not a url", "--agent", A, "--config", server.file], {}, { writeOut: () => undefined, writeErr: () => undefined })).toBe(2)
  })

  it("a machine client signing with a key of its metadata document (private_key_jwt), approved by the admin route", async () => {
    const { publicKey, privateKey } = await generateKeyPair("ES256")
    const id = `${site.base}/signed.json`
    site.docs.set("/signed.json", { client_id: id, redirect_uris: [callback], token_endpoint_auth_method: "private_key_jwt", jwks: { keys: [{ ...(await exportJWK(publicKey)), kid: "k1", alg: "ES256" }] } })
    const approved = await admin.post("/oauth/approve_client", { client_id: id, agent_id: A, machine: true })
    expect(approved.status, approved.text).toBe(200)
    expect((await admin.post("/oauth/approve_client", { client_id: 42, agent_id: A })).status).toBe(400)
    const assertion = () =>
      new SignJWT({}).setProtectedHeader({ alg: "ES256", kid: "k1" }).setIssuer(id).setSubject(id).setAudience(`${server.url}/oauth/token`).setIssuedAt().setExpirationTime("2m").setJti(crypto.randomUUID()).sign(privateKey)
    const signed = await assertion()
    const fields = { grant_type: "client_credentials", client_assertion_type: "urn:ietf:params:oauth:client-assertion-type:jwt-bearer", client_assertion: signed, resource: resourceA }
    const ok = await fetch(`${server.url}/oauth/token`, form(fields))
    expect(ok.status).toBe(200)
    // The same assertion twice is a replay.
    expect((await fetch(`${server.url}/oauth/token`, form(fields))).status).toBe(401)
  })

  it("the admin routes list the approved clients and withdraw one: its refresh tokens' families revoked, its access token refused at once", async () => {
    const id = `${site.base}/withdrawn.json`
    site.docs.set("/withdrawn.json", { client_id: id, redirect_uris: [callback] })
    expect((await admin.post("/oauth/approve_client", { client_id: id, agent_id: A, tools: ["svc__*"] })).status).toBe(200)
    const listed = await admin.get("/oauth/clients")
    expect(listed.status, listed.text).toBe(200)
    expect(listed.body.clients).toContainEqual({ client_id: id, agent_id: A, tools: ["svc__*"], machine: false, has_secret: false, approved: expect.any(String), approved_by: "api" })
    expect(listed.text).not.toMatch(/secret_sha256/)
    // Approved ahead of time: the flow completes without the page.
    const provider = new MemoryOAuthProvider(id, callback, resourceA)
    const back = new URL((await fetch(await authorizationUrl(provider), { redirect: "manual" })).headers.get("location") as string)
    expect(await auth(provider, { serverUrl: resourceA, authorizationCode: back.searchParams.get("code") as string, iss: server.url })).toBe("AUTHORIZED")
    const { access_token, refresh_token } = provider.saved!
    secrets.push(access_token, refresh_token!)
    const initialize = async () =>
      (await fetch(resourceA, { method: "POST", headers: { authorization: `Bearer ${access_token}`, "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25" }, body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "t", version: "1" } } }) })).status
    expect(await initialize()).toBe(200)

    const revoked = await admin.post("/oauth/revoke_client", { client_id: id })
    expect(revoked.status, revoked.text).toBe(200)
    expect(revoked.body).toEqual({ success: true, client_id: id, families_revoked: 1 })
    expect(await initialize()).toBe(401)
    expect((await json(await fetch(`${server.url}/oauth/token`, form({ grant_type: "refresh_token", refresh_token: refresh_token!, client_id: id })))).error).toBe("invalid_grant")
    expect(((await admin.get("/oauth/clients")).body.clients as Array<{ client_id: string }>).map((c) => c.client_id)).not.toContain(id)
    // Again: nothing to withdraw. Bad input and no key: refused, nothing changed.
    const again = await admin.post("/oauth/revoke_client", { client_id: id })
    expect(again.status).toBe(404)
    expect(again.body.error.code).toBe("NOT_FOUND")
    const bad = await admin.post("/oauth/revoke_client", { client_id: 42 })
    expect(bad.status).toBe(400)
    expect(bad.body.error.code).toBe("VALIDATION_ERROR")
    expect((await api(server.url).get("/oauth/clients")).status).toBe(401)
    expect((await api(server.url).post("/oauth/revoke_client", { client_id: clientId })).status).toBe(401)
    expect(((await admin.get("/oauth/clients")).body.clients as Array<{ client_id: string }>).map((c) => c.client_id)).toContain(clientId)
  })

  it("logs approvals, tokens given and refusals, never a code, token or secret", () => {
    const text = lines.join("")
    expect(text).toMatch(/approved OAuth client .*consent/)
    expect(text).toMatch(/issued an access token to OAuth client/)
    expect(text).toMatch(/revoked a token family .*used again/)
    expect(text).toMatch(/withdrew the approval of OAuth client .*withdrawn\.json \(1 token families revoked\)/)
    expect(text).toMatch(/refused an authorization request of client .*redirect_uri/)
    expect(secrets.length).toBeGreaterThanOrEqual(6)
    for (const secret of secrets) expect(text).not.toContain(secret)
  })

  it("Dynamic Client Registration: a public client, bad metadata refused", async () => {
    const ok = await fetch(`${server.url}/oauth/register`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ redirect_uris: [callback], client_name: "dcr" }) })
    expect(ok.status).toBe(201)
    expect((await json(ok)).client_id).toMatch(/^dcr_/)
    const bad = await fetch(`${server.url}/oauth/register`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ redirect_uris: ["http://attacker.example/cb"] }) })
    expect(bad.status).toBe(400)
    const secretClient = await fetch(`${server.url}/oauth/register`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ redirect_uris: [callback], token_endpoint_auth_method: "client_secret_basic" }) })
    expect(secretClient.status).toBe(400)
  })
})

describe("the built-in authorization server across a restart", () => {
  it("keeps its signing key (sealed, 0600) and its approvals: a token given before still verifies; registration can be turned off", { timeout: 60_000 }, async () => {
    const { statSync, readFileSync } = await import("node:fs")
    const { createLocalJWKSet } = await import("jose")
    const first = await startTestServer({ apiKey: ADMIN, options: { auth_server: true, auth_dev_loopback_clients: true } })
    const dir = first.dir
    let second: TestServer | undefined
    try {
      const id = "https://machine.example/client.json"
      let out = ""
      expect(await runOAuthClients(["approve-client", id, "--agent", A, "--machine", "--config", first.file], {}, { writeOut: (t) => void (out += t), writeErr: () => undefined })).toBe(0)
      const token = await json(await fetch(`${first.url}/oauth/token`, form({ grant_type: "client_credentials", client_id: id, client_secret: out.trim() })))
      expect(token.access_token).toBeTruthy()
      const keyFile = `${first.file}.oauth-server.key`
      expect(statSync(keyFile).mode & 0o777).toBe(0o600)
      expect(statSync(`${first.file}.oauth-server.json`).mode & 0o777).toBe(0o600)
      expect(readFileSync(keyFile, "utf8")).not.toContain('"d"')
      const before = await json(await fetch(`${first.url}/oauth/jwks`))
      await first.close()
      // Started again with Dynamic Client Registration turned off: not advertised, and refused.
      second = await startTestServer({ dir, apiKey: ADMIN, options: { auth_server: true, auth_dev_loopback_clients: true, auth_dynamic_registration: false } })
      expect(await json(await fetch(`${second.url}/.well-known/oauth-authorization-server`))).not.toHaveProperty("registration_endpoint")
      const register = await fetch(`${second.url}/oauth/register`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ redirect_uris: ["http://127.0.0.1:9/cb"] }) })
      expect(register.status).toBe(404)
      const after = await json(await fetch(`${second.url}/oauth/jwks`))
      expect(after).toEqual(before)
      await jwtVerify(token.access_token, createLocalJWKSet(after), { audience: `${first.url}/for_agent/${A}/mcp` })
      // The approval is still there: the secret still works on the new store.
      const again = await fetch(`${second.url}/oauth/token`, form({ grant_type: "client_credentials", client_id: id, client_secret: out.trim() }))
      expect(again.status).toBe(200)
    } finally {
      await second?.close()
      await first.cleanup()
    }
  })
})

describe("the built-in authorization server when its state cannot be written", () => {
  it("answers a consent decided meanwhile 503, and the consent still waits: decided again once the state is back", { timeout: 60_000 }, async () => {
    const { mkdirSync, rmSync } = await import("node:fs")
    const site = await startClientSite()
    const server = await startTestServer({ apiKey: ADMIN, options: { auth_server: true, auth_dev_loopback_clients: true } })
    try {
      const admin = authedApi(server.url, ADMIN)
      const clientId = `${site.base}/client.json`
      site.docs.set("/client.json", { client_id: clientId, redirect_uris: [`${site.base}/callback`] })
      const query = new URLSearchParams({ client_id: clientId, redirect_uri: `${site.base}/callback`, response_type: "code", code_challenge: "a".repeat(43), code_challenge_method: "S256", resource: `${server.url}/for_agent/${A}/mcp` })
      const page = await fetch(`${server.url}/oauth/authorize?${query}`, { redirect: "manual" })
      expect(page.status).toBe(200)
      const requestId = (JSON.parse(/<script type="application\/json" id="consent-data">([^<]*)<\/script>/.exec(await page.text())![1]!) as { request_id: string }).request_id
      // A directory where the file goes: the approval cannot be written.
      const file = `${server.file}.oauth-server.json`
      rmSync(file, { force: true })
      mkdirSync(file)
      const failed = await admin.post("/oauth/consent", { request_id: requestId, decision: "approve" })
      expect(failed.status, failed.text).toBe(503)
      expect(failed.body.error.code).toBe("SERVICE_UNAVAILABLE")
      rmSync(file, { recursive: true })
      const decided = await admin.post("/oauth/consent", { request_id: requestId, decision: "approve" })
      expect(decided.status, decided.text).toBe(200)
      expect(new URL(decided.body.location).searchParams.get("code")).toBeTruthy()
    } finally {
      await server.cleanup()
      await site.close()
    }
  })
})
