/**
 * The built-in authorization server (--auth-server) in replica mode: two replicas in this process on
 * one real Redis, one public URL (the issuer), a client metadata document served on loopback
 * (test/support/oauth-client.ts). A consent asked on A is decided on B and its code exchanged on A;
 * the same code exchanged again on B fails and revokes what it gave, which B then refuses; an
 * approval made on A lets B answer the authorization at once; a refresh on B of A's token rotates
 * it, and the old one presented again on A revokes the family; an access token revoked on A is
 * refused by B within the revocation copy's polling; a code or refresh token spent on both replicas
 * at once is spent once; a client approved, listed and withdrawn through the CLI's --url on either
 * replica (its tokens then refused on the other); one signing key for the cluster; a replica
 * without --public-url is refused at start; Redis hung: the token endpoint answers 503, not a hang.
 */
import { createHash, randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runOAuthClients } from "../../src/cli/oauth-clients-command.js"
import { loadClusterSigningKey } from "../../src/config/oauth-signing-key.js"
import { eventually, hasRedisServer, startClientSite, useReplicaCluster, type TestServer } from "../support/index.js"

const CLUSTER = "oauth-server"
const ADMIN = "admin-key-for-oauth-server-replicas"
const PUBLIC = "http://store.cluster.test"
const AGENT = "agent-a"
const RESOURCE = `${PUBLIC}/for_agent/${AGENT}/mcp`

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any

const form = (fields: Record<string, string>) => ({ method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams(fields).toString() })

/** A PKCE pair. */
const pkce = () => {
  const verifier = randomBytes(32).toString("base64url")
  return { verifier, challenge: createHash("sha256").update(verifier, "ascii").digest("base64url") }
}

describe.skipIf(!hasRedisServer)("the built-in authorization server across replicas", { timeout: 30_000 }, () => {
  const cluster = useReplicaCluster()
  let site: Awaited<ReturnType<typeof startClientSite>>
  let a: TestServer
  let b: TestServer
  let clientId: string
  let callback: string
  const options = { auth_server: true, auth_dev_loopback_clients: true, public_url: PUBLIC, api_key: ADMIN }

  beforeAll(async () => {
    site = await startClientSite()
    clientId = `${site.base}/client.json`
    callback = `${site.base}/callback`
    site.docs.set("/client.json", { client_id: clientId, client_name: "replica client", redirect_uris: [callback] })
    a = await cluster.replica(CLUSTER, {}, options)
    b = await cluster.replica(CLUSTER, undefined, options)
  }, 30_000)
  afterAll(async () => {
    await site?.close()
  })

  const authorizeOn = (replica: TestServer, challenge: string) =>
    fetch(`${replica.url}/oauth/authorize?${new URLSearchParams({ response_type: "code", client_id: clientId, redirect_uri: callback, code_challenge: challenge, code_challenge_method: "S256", resource: RESOURCE, state: "st", scope: "mcp-store:tools offline_access" })}`, { redirect: "manual" })
  const tokenOn = async (replica: TestServer, fields: Record<string, string>): Promise<{ status: number; body: Json }> => {
    const r = await fetch(`${replica.url}/oauth/token`, form({ client_id: clientId, ...fields }))
    return { status: r.status, body: await r.json() }
  }
  const adminPost = async (replica: TestServer, path: string, body: unknown): Promise<{ status: number; body: Json }> => {
    const r = await fetch(replica.url + path, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${ADMIN}` }, body: JSON.stringify(body) })
    return { status: r.status, body: await r.json() }
  }
  /** The status of an MCP initialize on `replica`'s agent endpoint with `token`. */
  const mcpWith = async (replica: TestServer, token: string): Promise<number> => {
    const r = await fetch(`${replica.url}/for_agent/${AGENT}/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${token}` },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } } })
    })
    await r.body?.cancel()
    return r.status
  }

  it("presents one issuer and one signing key on every replica", async () => {
    const [metaA, metaB, jwksA, jwksB] = await Promise.all([
      fetch(`${a.url}/.well-known/oauth-authorization-server`).then((r) => r.json() as Promise<Json>),
      fetch(`${b.url}/.well-known/oauth-authorization-server`).then((r) => r.json() as Promise<Json>),
      fetch(`${a.url}/oauth/jwks`).then((r) => r.json() as Promise<Json>),
      fetch(`${b.url}/oauth/jwks`).then((r) => r.json() as Promise<Json>)
    ])
    expect(metaA.issuer).toBe(PUBLIC)
    expect(metaB.issuer).toBe(PUBLIC)
    expect(jwksA.keys).toHaveLength(1)
    expect(jwksB.keys).toEqual(jwksA.keys)
    expect(jwksA.keys[0]).not.toHaveProperty("d")
    // Sealed in Redis under MCPSTORE_SECRET_KEY: the same key read back with it, refused with another secret.
    const client = await cluster.redis.connect()
    try {
      const stored = await client.get(`mcp-store:{${CLUSTER}}:oauth-server:key`)
      expect(stored).not.toContain(`"d"`)
      expect((await loadClusterSigningKey({ client, cluster: CLUSTER })).kid).toBe(jwksA.keys[0].kid)
      await expect(loadClusterSigningKey({ client, cluster: CLUSTER }, "another secret")).rejects.toThrow(/MCPSTORE_SECRET_KEY/)
    } finally {
      client.destroy()
    }
  })

  it("a consent asked on A is decided on B, its code exchanged on A; the same code again on B fails and revokes what it gave, on B too", async () => {
    const { verifier, challenge } = pkce()
    const page = await authorizeOn(a, challenge)
    expect(page.status).toBe(200)
    const requestId = /"request_id":"([^"]+)"/.exec(await page.text())?.[1] as string
    expect(requestId).toBeTruthy()
    const decided = await adminPost(b, "/oauth/consent", { request_id: requestId, decision: "approve" })
    expect(decided.status, JSON.stringify(decided.body)).toBe(200)
    // Decided once: the consent is gone on every replica.
    expect((await adminPost(a, "/oauth/consent", { request_id: requestId, decision: "approve" })).status).toBe(404)
    const back = new URL(decided.body.location)
    expect(back.searchParams.get("iss")).toBe(PUBLIC)
    const code = back.searchParams.get("code") as string
    const first = await tokenOn(a, { grant_type: "authorization_code", code, code_verifier: verifier, redirect_uri: callback })
    expect(first.status, JSON.stringify(first.body)).toBe(200)
    expect(await mcpWith(b, first.body.access_token)).toBe(200)
    const again = await tokenOn(b, { grant_type: "authorization_code", code, code_verifier: verifier, redirect_uri: callback })
    expect(again.status).toBe(400)
    expect(again.body.error).toBe("invalid_grant")
    // The family the first exchange gave is revoked across the cluster: its refresh token and, on B, its access token.
    expect((await tokenOn(b, { grant_type: "refresh_token", refresh_token: first.body.refresh_token })).body.error).toBe("invalid_grant")
    expect(await eventually(async () => (await mcpWith(b, first.body.access_token)) === 401, 3000, 50)).toBe(true)
  })

  it("an approval made on A lets B give the code at once; a refresh on B of A's token rotates it, the old one again on A revokes the family", async () => {
    expect((await adminPost(a, "/oauth/approve_client", { client_id: clientId, agent_id: AGENT })).status).toBe(200)
    const { verifier, challenge } = pkce()
    const direct = await authorizeOn(b, challenge)
    expect(direct.status).toBe(302)
    const code = new URL(direct.headers.get("location") as string).searchParams.get("code") as string
    const tokens = await tokenOn(a, { grant_type: "authorization_code", code, code_verifier: verifier, redirect_uri: callback })
    expect(tokens.status, JSON.stringify(tokens.body)).toBe(200)
    const rotated = await tokenOn(b, { grant_type: "refresh_token", refresh_token: tokens.body.refresh_token })
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200)
    expect(rotated.body.refresh_token).not.toBe(tokens.body.refresh_token)
    expect(await mcpWith(a, rotated.body.access_token)).toBe(200)
    const reused = await tokenOn(a, { grant_type: "refresh_token", refresh_token: tokens.body.refresh_token })
    expect(reused.status).toBe(400)
    expect(reused.body.error).toBe("invalid_grant")
    // The whole family: the rotated refresh token too, on the other replica.
    expect((await tokenOn(b, { grant_type: "refresh_token", refresh_token: rotated.body.refresh_token })).body.error).toBe("invalid_grant")
  })

  it("an access token revoked on A is refused by B", async () => {
    const { verifier, challenge } = pkce()
    const direct = await authorizeOn(a, challenge)
    expect(direct.status).toBe(302)
    const code = new URL(direct.headers.get("location") as string).searchParams.get("code") as string
    const tokens = await tokenOn(b, { grant_type: "authorization_code", code, code_verifier: verifier, redirect_uri: callback })
    expect(tokens.status).toBe(200)
    expect(await mcpWith(b, tokens.body.access_token)).toBe(200)
    const revoked = await fetch(`${a.url}/oauth/revoke`, form({ client_id: clientId, token: tokens.body.access_token }))
    expect(revoked.status).toBe(200)
    expect(await mcpWith(a, tokens.body.access_token)).toBe(401)
    expect(await eventually(async () => (await mcpWith(b, tokens.body.access_token)) === 401, 3000, 50)).toBe(true)
    // The family was not revoked: its refresh token still works, anywhere.
    expect((await tokenOn(b, { grant_type: "refresh_token", refresh_token: tokens.body.refresh_token })).status).toBe(200)
  })

  it("one code exchanged on A and on B at the same moment, and one refresh token on both: one answer each wins", async () => {
    const { verifier, challenge } = pkce()
    const direct = await authorizeOn(a, challenge)
    expect(direct.status).toBe(302)
    const code = new URL(direct.headers.get("location") as string).searchParams.get("code") as string
    const exchange = { grant_type: "authorization_code", code, code_verifier: verifier, redirect_uri: callback }
    const both = await Promise.all([tokenOn(a, exchange), tokenOn(b, exchange)])
    expect(both.map((t) => t.status).sort()).toEqual([200, 400])
    const won = both.find((t) => t.status === 200)!
    // The loser revoked what the winner got (a code used twice): the refresh token is dead too.
    expect((await tokenOn(a, { grant_type: "refresh_token", refresh_token: won.body.refresh_token })).status).toBe(400)

    const { verifier: v2, challenge: c2 } = pkce()
    const code2 = new URL((await authorizeOn(b, c2)).headers.get("location") as string).searchParams.get("code") as string
    const pair = await tokenOn(b, { grant_type: "authorization_code", code: code2, code_verifier: v2, redirect_uri: callback })
    expect(pair.status).toBe(200)
    const refreshes = await Promise.all([tokenOn(a, { grant_type: "refresh_token", refresh_token: pair.body.refresh_token }), tokenOn(b, { grant_type: "refresh_token", refresh_token: pair.body.refresh_token })])
    expect(refreshes.filter((r) => r.status === 200)).toHaveLength(1)
    // The racing reuse revoked the family: the new refresh token is refused as well.
    const fresh = refreshes.find((r) => r.status === 200)!
    expect((await tokenOn(b, { grant_type: "refresh_token", refresh_token: fresh.body.refresh_token })).status).toBe(400)
  })

  it("the CLI through a replica (--url): a client approved on A is listed on B and withdrawn there; A refuses its tokens at once", async () => {
    const id = `${site.base}/withdrawn.json`
    site.docs.set("/withdrawn.json", { client_id: id, redirect_uris: [callback] })
    const run = async (argv: ReadonlyArray<string>) => {
      let out = ""
      let err = ""
      const code = await runOAuthClients(argv, {}, { writeOut: (t) => void (out += t), writeErr: (t) => void (err += t) })
      return { code, out, err }
    }
    expect((await run(["approve-client", id, "--agent", AGENT, "--url", a.url, "--api-key", ADMIN])).code).toBe(0)
    const listed = await run(["list-clients", "--url", b.url, "--api-key", ADMIN])
    expect(listed.code, listed.err).toBe(0)
    expect(listed.out).toMatch(new RegExp(`^${id.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\s+${AGENT}\\s+-\\s+user\\s`, "m"))
    const { verifier, challenge } = pkce()
    const direct = await fetch(`${a.url}/oauth/authorize?${new URLSearchParams({ response_type: "code", client_id: id, redirect_uri: callback, code_challenge: challenge, code_challenge_method: "S256", resource: RESOURCE, state: "st", scope: "mcp-store:tools offline_access" })}`, { redirect: "manual" })
    expect(direct.status).toBe(302)
    const code = new URL(direct.headers.get("location") as string).searchParams.get("code") as string
    const tokens = await fetch(`${a.url}/oauth/token`, form({ client_id: id, grant_type: "authorization_code", code, code_verifier: verifier, redirect_uri: callback }))
    const body = (await tokens.json()) as Json
    expect(tokens.status, JSON.stringify(body)).toBe(200)
    expect(await mcpWith(a, body.access_token)).toBe(200)
    const revoked = await run(["revoke-client", id, "--url", b.url, "--api-key", ADMIN])
    expect(revoked.code, revoked.err).toBe(0)
    expect(revoked.out).toMatch(/revoked client .* through the store at .* \(1 token families revoked\)/)
    expect(await eventually(async () => (await mcpWith(a, body.access_token)) === 401, 3000, 50)).toBe(true)
    const refreshed = await fetch(`${a.url}/oauth/token`, form({ client_id: id, grant_type: "refresh_token", refresh_token: body.refresh_token }))
    expect(((await refreshed.json()) as Json).error).toBe("invalid_grant")
    expect((await run(["list-clients", "--url", a.url, "--api-key", ADMIN])).out).not.toContain(id)
    // Nothing left to withdraw: the store's 404, told as such (exit code 1).
    const again = await run(["revoke-client", id, "--url", a.url, "--api-key", ADMIN])
    expect(again.code).toBe(1)
    expect(again.err).toMatch(/HTTP 404/)
  })

  it("refuses a replica without --public-url at start", async () => {
    await expect(cluster.replica(CLUSTER, undefined, { auth_server: true, api_key: ADMIN })).rejects.toThrow(/--public-url/)
  })

  it("answers 503 at the token endpoint while Redis hangs, not a hang", async () => {
    const { challenge } = pkce()
    expect((await authorizeOn(a, challenge)).status).toBe(302)
    cluster.redis.freeze()
    try {
      const started = Date.now()
      const answer = await tokenOn(b, { grant_type: "authorization_code", code: "x".repeat(43), code_verifier: "y".repeat(43), redirect_uri: callback })
      expect(answer.status).toBe(503)
      expect(answer.body.error).toBe("temporarily_unavailable")
      expect(Date.now() - started).toBeLessThan(5000)
    } finally {
      cluster.redis.thaw()
    }
  })
})
