/**
 * Upstream OAuth across replicas (docs/oauth.md, "Replica mode"): two replicas on one real Redis, an
 * OAuth-protected MCP fixture whose authorization server issues each user's own tokens
 * (test/fixtures/oauth-server.ts, `login_hint`; `whoami` answers the token's user). A service-wide
 * authorization started on A is finished by the browser's callback on B and the service becomes
 * healthy; the same callback replayed is refused; a principal's own authorization started on one
 * replica is finished on the other (callback or pasted code) and its calls through either replica
 * are seen upstream as its own user; one state finished on both replicas at once is taken once;
 * expired states of any replica are swept; DELETE on B refuses the next call through A CREDENTIALS_REQUIRED; a
 * service that takes values and an authorization is refused through either replica saying which the
 * caller lacks (the forwarded refusal as its owner made it); `mcp-store auth approve-client
 * --url` against a replica lets the built-in authorization server answer without its consent page;
 * Redis frozen, a principal's call, its status and a callback answer 503, never hang.
 */
import { createHash, randomBytes } from "node:crypto"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runKeys } from "../../src/cli/keys-command.js"
import { runOAuthClients } from "../../src/cli/oauth-clients-command.js"
import { clusterKey } from "../../src/redis/key-names.js"
import { startOAuthFixture, type OAuthFixture } from "../fixtures/oauth-server.js"
import { approveAsUser, authedApi, callbackInBrowser, eventually, freshDir, hasRedisServer, startClientSite, useReplicaCluster, within, type Api, type TestServer } from "../support/index.js"

const CLUSTER = "oauth-upstream"
const PUBLIC = "http://store.replicas.test"
const ROUTE = "/for_store/credentials/secure"

const createKey = async (file: string, name: string): Promise<string> => {
  let out = ""
  const code = await runKeys(["create", "--role", "admin", "--name", name, "--keys-file", file], {}, { writeOut: (t) => void (out += t), writeErr: () => undefined })
  expect(code).toBe(0)
  return out.trim()
}

describe.skipIf(!hasRedisServer)("upstream OAuth across replicas", { timeout: 30_000 }, () => {
  const cluster = useReplicaCluster()
  let fixture: OAuthFixture
  let a: TestServer
  let b: TestServer
  const keys: Record<"ops" | "alice" | "bob", string> = { ops: "", alice: "", bob: "" }
  const on: Record<"a" | "b", Record<"ops" | "alice" | "bob", Api>> = { a: {} as never, b: {} as never }

  beforeAll(async () => {
    fixture = await startOAuthFixture()
    const keysFile = join(freshDir(), "mcp-store.keys.json")
    for (const name of ["ops", "alice", "bob"] as const) keys[name] = await createKey(keysFile, name)
    const options = { keys_file: keysFile, lease_ms: 5000, auth_server: true, auth_dev_loopback_clients: true, public_url: PUBLIC }
    ;[a, b] = await Promise.all([cluster.replica(CLUSTER, { mcpServers: {} }, options), cluster.replica(CLUSTER, undefined, options)])
    for (const [name, replica] of [["a", a], ["b", b]] as const) {
      on[name] = { ops: authedApi(replica.url, keys.ops), alice: authedApi(replica.url, keys.alice), bob: authedApi(replica.url, keys.bob) }
    }
    // Taken in replica mode now (it was refused with a 400 before).
    const added = await on.a.ops.post("/for_store/add_service", { name: "secure", url: fixture.url, per_user: { oauth: true } })
    expect(added.status, added.text).toBe(200)
    const waited = await on.a.ops.post("/for_store/wait_service", { client_id_or_service_name: "secure", status: "unreachable", timeout: 15 })
    expect(waited.body.data?.final_status, waited.text).toBe("unreachable")
  }, 30_000)

  afterAll(async () => {
    await fixture?.stop()
  })

  /** The store's callback (its public URL, behind which any replica answers) reached on `replica`, its question (a principal's own authorization) answered there. */
  const callbackOn = async (replica: TestServer, back: URL): Promise<{ status: number; text: string }> => {
    expect(back.origin + back.pathname).toBe(`${PUBLIC}/oauth/callback`)
    return callbackInBrowser(back, "connect", replica.url)
  }

  /** A principal's own authorization started on a replica: the URL to open. */
  const start = async (client: Api): Promise<string> => {
    const started = await client.post(`${ROUTE}/authorize`)
    expect(started.status, started.text).toBe(200)
    expect(started.body.state).toBe("authorizing")
    return started.body.authorization_url as string
  }

  const whoami = async (client: Api): Promise<string | null> => {
    const reply = await client.post("/for_store/call_tool", { tool_name: "secure__whoami", args: {} })
    expect(reply.status, reply.text).toBe(200)
    return (JSON.parse(reply.body.content[0].text) as { user: string | null }).user
  }

  it("a service-wide authorization started on A is finished by the callback on B: the service becomes healthy; the callback replayed on A is refused", async () => {
    const started = await on.a.ops.post("/for_store/authorize_service", { service_name: "secure" })
    expect(started.status, started.text).toBe(200)
    const back = await approveAsUser(started.body.authorization_url as string, "operator")
    const page = await callbackOn(b, back)
    expect(page.status, page.text).toBe(200)
    expect(page.text).toContain("the store now connects to the service")
    for (const replica of ["a", "b"] as const) {
      const ready = await on[replica].ops.post("/for_store/wait_service", { client_id_or_service_name: "secure", status: "healthy", timeout: 15 })
      expect(ready.body.data?.final_status, `${replica}: ${ready.text}`).toBe("healthy")
    }
    const replayed = await callbackOn(a, back)
    expect(replayed.status).toBe(400)
    expect(replayed.text).toContain("already used state")
    // Redis holds the state no more, and never a token in clear.
    const client = await cluster.redis.connect()
    expect(await client.hLen(clusterKey(CLUSTER, "oauth", "pending"))).toBe(0)
    expect(await client.zCard(clusterKey(CLUSTER, "oauth", "pending", "expiry"))).toBe(0)
    expect(JSON.stringify(await client.hGetAll(clusterKey(CLUSTER, "oauth")))).not.toContain("access_token")
  })

  it("a callback on B without the iss the authorization server sends, for a state started on A, is refused saying so (not as a mix-up)", async () => {
    const issuing = await startOAuthFixture({ iss: true })
    try {
      expect((await on.a.ops.post("/for_store/add_service", { name: "issuing", url: issuing.url })).status).toBe(200)
      const waited = await on.a.ops.post("/for_store/wait_service", { client_id_or_service_name: "issuing", status: "unreachable", timeout: 15 })
      expect(waited.body.data?.final_status, waited.text).toBe("unreachable")
      const started = await on.a.ops.post("/for_store/authorize_service", { service_name: "issuing" })
      expect(started.status, started.text).toBe(200)
      const back = await approveAsUser(started.body.authorization_url as string, "operator")
      expect(back.searchParams.get("iss")).toBe(issuing.issuer)
      back.searchParams.delete("iss")
      const page = await callbackOn(b, back)
      expect(page.status, page.text).toBe(400)
      expect(page.text).toContain("and none came: start the authorization again")
      expect(page.text).not.toContain("may come from another authorization server")
    } finally {
      // Gone before the tests after it, which count on "secure" alone.
      expect((await on.a.ops.del("/for_store/delete_service/issuing")).status).toBe(200)
      await issuing.stop()
    }
  })

  it("a principal's own authorization started on one replica is finished on the other (callback, pasted code): its calls through both are its own user's", async () => {
    // Alice starts on A, her browser comes back to B.
    const alicePage = await callbackOn(b, await approveAsUser(await start(on.a.alice), "alice"))
    expect(alicePage.status, alicePage.text).toBe(200)
    expect(alicePage.text).toContain("your own token")
    // Bob starts on B and pastes his code and state on A.
    const bobBack = await approveAsUser(await start(on.b.bob), "bob")
    // Alice presenting Bob's state changes nothing (read from Redis on the replica that did not start it).
    const stolen = await on.a.alice.post(`${ROUTE}/authorize`, { code: bobBack.searchParams.get("code"), state: bobBack.searchParams.get("state") })
    expect(stolen.status, stolen.text).toBe(400)
    const pasted = await on.a.bob.post(`${ROUTE}/authorize`, { code: bobBack.searchParams.get("code"), state: bobBack.searchParams.get("state") })
    expect(pasted.status, pasted.text).toBe(200)
    expect(pasted.body.state).toBe("authorized")
    for (const replica of ["a", "b"] as const) {
      expect({ replica, alice: await whoami(on[replica].alice), bob: await whoami(on[replica].bob) }).toEqual({ replica, alice: "alice", bob: "bob" })
      const status = await on[replica].alice.get(ROUTE)
      expect(status.body.oauth, status.text).toMatchObject({ required: true, authorized: true })
    }
  })

  it("one state finished on both replicas at the same moment is taken once: one page says authorized, the other refuses it", async () => {
    // An expired state a replica gone left behind is removed by the next one kept, on any replica.
    const client = await cluster.redis.connect()
    await client.multi().hSet(clusterKey(CLUSTER, "oauth", "pending"), "left-behind", "sealed").zAdd(clusterKey(CLUSTER, "oauth", "pending", "expiry"), { score: 1, value: "left-behind" }).exec()
    const back = await approveAsUser(await start(on.b.alice), "alice")
    expect(Number(await client.hExists(clusterKey(CLUSTER, "oauth", "pending"), "left-behind"))).toBe(0)
    // Both pages ask; both answers are posted at once.
    const pages = await Promise.all([callbackOn(a, back), callbackOn(b, back)])
    expect(pages.map((p) => p.status).sort()).toEqual([200, 400])
    expect(await whoami(on.a.alice)).toBe("alice")
  })

  it("DELETE on B drops the principal's tokens everywhere: the next call through A is refused CREDENTIALS_REQUIRED; the other principal is untouched", async () => {
    const deleted = await on.b.alice.del(ROUTE)
    expect(deleted.status, deleted.text).toBe(200)
    for (const replica of ["a", "b"] as const) {
      const refused = await on[replica].alice.post("/for_store/call_tool", { tool_name: "secure__whoami", args: {} })
      expect(refused.status, `${replica}: ${refused.text}`).toBe(403)
      expect(refused.body.error.code).toBe("CREDENTIALS_REQUIRED")
      expect(refused.body.error.details.route).toBe(`POST ${ROUTE}/authorize`)
      expect((await on[replica].alice.get(ROUTE)).body.oauth.authorized).toBe(false)
    }
    expect(await whoami(on.a.bob)).toBe("bob")
  })

  it("a service that takes values and an authorization: the refusal says which the caller lacks through either replica, the forwarded one as the one that runs it said it", async () => {
    const added = await on.a.ops.post("/for_store/add_service", { name: "mixed", url: fixture.url, per_user: { headers: ["X-Tenant"], oauth: true } })
    expect(added.status, added.text).toBe(200)
    expect((await on.a.ops.post("/for_store/wait_service", { client_id_or_service_name: "mixed", status: "unreachable", timeout: 15 })).status).toBe(200)
    const shared = await on.a.ops.post("/for_store/authorize_service", { service_name: "mixed" })
    expect((await callbackOn(a, await approveAsUser(shared.body.authorization_url as string, "operator"))).status).toBe(200)
    for (const replica of ["a", "b"] as const) {
      const ready = await on[replica].ops.post("/for_store/wait_service", { client_id_or_service_name: "mixed", status: "healthy", timeout: 15 })
      expect(ready.body.data?.final_status, `${replica}: ${ready.text}`).toBe("healthy")
    }
    const values = "PUT /for_store/credentials/mixed"
    const authorize = "POST /for_store/credentials/mixed/authorize"
    const refusal = async (replica: "a" | "b") => {
      const reply = await on[replica].alice.post("/for_store/call_tool", { tool_name: "mixed__whoami", args: {} })
      expect(reply.status, `${replica}: ${reply.text}`).toBe(403)
      expect(reply.body.error.code).toBe("CREDENTIALS_REQUIRED")
      return { replica, missing: reply.body.error.details.missing, route: reply.body.error.details.route, putWords: reply.body.message.includes(values) }
    }
    // One replica runs the service, the other forwards the call with alice's principal.
    for (const replica of ["a", "b"] as const) expect(await refusal(replica)).toEqual({ replica, missing: ["values", "authorization"], route: values, putWords: true })
    const put = await on.a.alice.request("PUT", "/for_store/credentials/mixed", { body: JSON.stringify({ headers: { "X-Tenant": "acme" } }), headers: { "content-type": "application/json" } })
    expect(put.status, put.text).toBe(200)
    for (const replica of ["a", "b"] as const) expect(await refusal(replica)).toEqual({ replica, missing: ["authorization"], route: authorize, putWords: false })
    const page = await callbackOn(b, await approveAsUser((await on.b.alice.post("/for_store/credentials/mixed/authorize")).body.authorization_url as string, "alice"))
    expect(page.status, page.text).toBe(200)
    for (const replica of ["a", "b"] as const) {
      const reply = await on[replica].alice.post("/for_store/call_tool", { tool_name: "mixed__whoami", args: {} })
      expect(reply.status, `${replica}: ${reply.text}`).toBe(200)
    }
  })

  it("auth approve-client --url against a replica approves in Redis: another replica's authorization endpoint answers without the consent page", async () => {
    const site = await startClientSite()
    try {
      const clientId = `${site.base}/client.json`
      const callback = `${site.base}/callback`
      site.docs.set("/client.json", { client_id: clientId, client_name: "approved by the cli", redirect_uris: [callback] })
      const verifier = randomBytes(32).toString("base64url")
      const challenge = createHash("sha256").update(verifier, "ascii").digest("base64url")
      const authorize = () =>
        fetch(
          `${a.url}/oauth/authorize?${new URLSearchParams({ response_type: "code", client_id: clientId, redirect_uri: callback, code_challenge: challenge, code_challenge_method: "S256", resource: `${PUBLIC}/for_agent/team/mcp`, state: "st", scope: "mcp-store:tools" })}`,
          { redirect: "manual" }
        )
      const before = await authorize()
      await before.body?.cancel()
      expect(before.status).toBe(200) // the consent page
      let err = ""
      const exit = await runOAuthClients(["approve-client", clientId, "--agent", "team", "--url", b.url, "--api-key", keys.ops], {}, { writeErr: (t) => void (err += t), writeOut: () => undefined })
      expect(exit, err).toBe(0)
      expect(err).toContain(`by the store at ${b.url}`)
      const after = await authorize()
      expect(after.status).toBe(302)
      const code = new URL(after.headers.get("location") as string).searchParams.get("code") as string
      const tokens = await fetch(`${b.url}/oauth/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ grant_type: "authorization_code", client_id: clientId, code, code_verifier: verifier, redirect_uri: callback }).toString()
      })
      expect(tokens.status).toBe(200)
      expect(((await tokens.json()) as { access_token?: unknown }).access_token).toEqual(expect.any(String))
      // A key that is not the store's is refused by the store, and the command says so (exit 1).
      let refusedErr = ""
      const refused = await runOAuthClients(["approve-client", clientId, "--agent", "team", "--url", b.url, "--api-key", "not-a-key"], {}, { writeErr: (t) => void (refusedErr += t), writeOut: () => undefined })
      expect(refused, refusedErr).toBe(1)
      expect(refusedErr).toContain("HTTP 401")
    } finally {
      await site.close()
    }
  })

  // Bounded, not timed (each Redis command has a 2 s time-out; a loaded machine stretches the answers): `within` only catches a hang.
  it("Redis frozen: a principal's call, its status and a callback answer 503 within their bounds, never hang", { timeout: 75_000 }, async () => {
    const back = await approveAsUser(await start(on.a.alice), "alice")
    // The two services balanced, one a replica, before the freeze: a hand-over under way when Redis
    // stops answering leaves its service with no owner until it answers again (a 502 saying so).
    const fields = ["store/secure", "store/mixed"]
    const owned = (r: TestServer) => fields.filter((f) => r.running.cluster?.owns(f) === true).length
    expect(await eventually(() => owned(a) === 1 && owned(b) === 1, 30_000)).toBe(true)
    for (const replica of ["a", "b"] as const) {
      const settled = await on[replica].ops.post("/for_store/wait_service", { client_id_or_service_name: "secure", status: "healthy", timeout: 15 })
      expect(settled.body.data?.final_status, settled.text).toBe("healthy")
    }
    cluster.redis.freeze()
    try {
      const call = await within(on.b.bob.post("/for_store/call_tool", { tool_name: "secure__whoami", args: {} }), 15_000, "a call while Redis is frozen")
      expect(call.status, call.text).toBe(503)
      const status = await within(on.a.bob.get(ROUTE), 15_000, "a status while Redis is frozen")
      expect(status.status, status.text).toBe(503)
      expect(status.body.error.details.reason).toBe("cluster_unavailable")
      const pasted = await within(on.a.alice.post(`${ROUTE}/authorize`, { code: back.searchParams.get("code"), state: back.searchParams.get("state") }), 15_000, "a pasted code while Redis is frozen")
      expect(pasted.status, pasted.text).toBe(503)
      expect(pasted.body.error.details.reason).toBe("cluster_unavailable")
      const page = await within(callbackOn(b, back), 15_000, "a callback while Redis is frozen")
      expect(page.status, page.text).toBe(503)
    } finally {
      cluster.redis.thaw()
    }
  })
})
