// The built-in authorization server's grants below HTTP (src/http/oauth-server/grants.ts), with a
// clock the test moves: a revocation outlasting the protected resource's clock tolerance,
// confidential clients made to authenticate for the code and refresh grants, a code refused once
// its client's approval is withdrawn, client assertions (type, lifetime, replay record, rotated
// keys), and the client metadata cache's failures (general words, kept a while).
import { createHash, randomBytes } from "node:crypto"
import { readFileSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { calculateJwkThumbprint, exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from "jose"
import { oauthServerFileOf } from "../../src/config/oauth-server-file.js"
import type { SigningKey } from "../../src/config/oauth-signing-key.js"
import { configureLogging } from "../../src/logging/log.js"
import { UpstreamPolicy } from "../../src/mcp/upstream-policy.js"
import { ClientMetadataCache } from "../../src/http/oauth-server/client-metadata.js"
import { FileGrantState } from "../../src/http/oauth-server/grant-state.js"
import { AuthorizationServer, type TokenAnswer } from "../../src/http/oauth-server/grants.js"
import { TokenVerifier } from "../../src/http/oauth-resource/token-verifier.js"
import { freshDir } from "../support/server.js"
import { startClientSite } from "../support/index.js"

const ISSUER = "http://127.0.0.1:18300"
const AGENT = "agent-a"
const RESOURCE = `${ISSUER}/for_agent/${AGENT}/mcp`
const ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

const signingKey = async (): Promise<SigningKey> => {
  const { privateKey, publicKey } = await generateKeyPair("ES256")
  const pub = await exportJWK(publicKey)
  const kid = await calculateJwkThumbprint(pub)
  return { privateKey, publicJwk: { ...pub, kid, alg: "ES256", use: "sig" }, kid }
}

const body = (answer: TokenAnswer) => (answer.status === 200 ? answer.body : { error: answer.error, status: answer.status })

describe("the built-in authorization server's grants", () => {
  let site: Awaited<ReturnType<typeof startClientSite>>
  let callback: string
  let clock = Date.now()
  let server: AuthorizationServer
  let state: FileGrantState
  const assertionsKept: number[] = []
  let stateFile: string

  beforeAll(async () => {
    site = await startClientSite()
    callback = `${site.base}/callback`
    stateFile = oauthServerFileOf(join(freshDir(), "mcp.json"))
    state = new FileGrantState(join(dirname(stateFile), "mcp.json"), () => clock)
    const useAssertion = state.useAssertion.bind(state)
    state.useAssertion = (id, until) => {
      assertionsKept.push(until)
      return useAssertion(id, until)
    }
    server = new AuthorizationServer({ servicesFile: join(freshDir(), "mcp.json"), issuer: () => ISSUER, key: await signingKey(), policy: new UpstreamPolicy(), devLoopbackClients: true, dynamicRegistration: true, state, now: () => clock })
  })
  afterAll(async () => {
    await server?.close()
    await site?.close()
  })

  /** A client document on the site, approved for the agent; its secret when `machine`. */
  const client = async (name: string, doc: Record<string, unknown> = {}, machine = false) => {
    const id = `${site.base}/${name}.json`
    site.docs.set(`/${name}.json`, { client_id: id, redirect_uris: [callback], ...doc })
    const approved = await server.approve({ clientId: id, agent: AGENT, tools: null, machine, by: "api" })
    if ("error" in approved) throw new Error(approved.description)
    return { id, secret: approved.secret }
  }

  /** A code for an approved client, with its verifier. */
  const codeFor = async (clientId: string) => {
    const verifier = randomBytes(32).toString("base64url")
    const challenge = createHash("sha256").update(verifier).digest("base64url")
    const outcome = await server.authorize({ client_id: clientId, redirect_uri: callback, response_type: "code", code_challenge: challenge, code_challenge_method: "S256", resource: RESOURCE })
    if (outcome.kind !== "redirect") throw new Error(`no code: ${JSON.stringify(outcome)}`)
    return { code: new URL(outcome.location).searchParams.get("code") as string, verifier }
  }

  const exchange = (clientId: string, code: { code: string; verifier: string }, extra: Record<string, string> = {}) =>
    server.token(new URLSearchParams({ grant_type: "authorization_code", client_id: clientId, code: code.code, code_verifier: code.verifier, redirect_uri: callback, ...extra }), undefined)

  const assertion = (id: string, key: CryptoKey, kid: string, edit: (j: SignJWT) => SignJWT = (j) => j) =>
    edit(new SignJWT({}).setProtectedHeader({ alg: "ES256", kid }).setIssuer(id).setSubject(id).setAudience(`${ISSUER}/oauth/token`).setIssuedAt().setExpirationTime("2m").setJti(randomBytes(12).toString("base64url"))).sign(key)

  const signingClient = async (name: string, machine = true) => {
    const { publicKey, privateKey } = await generateKeyPair("ES256")
    const jwk: JWK = { ...(await exportJWK(publicKey)), kid: `${name}-1`, alg: "ES256" }
    const made = await client(name, { token_endpoint_auth_method: "private_key_jwt", jwks: { keys: [jwk] } }, machine)
    return { ...made, privateKey, kid: jwk.kid as string }
  }

  it("keeps a revocation while the protected resource still accepts the token (its exp plus the clock tolerance)", async () => {
    const { id } = await client("revoked")
    const verifier = new TokenVerifier([server.trustedIssuer()])
    // Tokens given 10 min 10 s ago: expired 10 s ago, within the resource's 30 s tolerance.
    clock = Date.now() - 610_000
    const first = body(await exchange(id, await codeFor(id)))
    const second = body(await exchange(id, await codeFor(id)))
    expect(first.access_token).toBeTruthy()
    expect((await verifier.verify(first.access_token as string, [RESOURCE])).ok).toBe(true)
    // One access token revoked by itself, the other's family by its refresh token, both then.
    expect((await server.revoke(new URLSearchParams({ token: first.access_token as string, client_id: id }), undefined)).status).toBe(200)
    expect((await server.revoke(new URLSearchParams({ token: second.refresh_token as string, client_id: id }), undefined)).status).toBe(200)
    clock = Date.now()
    expect(await verifier.verify(first.access_token as string, [RESOURCE])).toMatchObject({ ok: false, why: "revoked" })
    expect(await verifier.verify(second.access_token as string, [RESOURCE])).toMatchObject({ ok: false, why: "revoked" })
  })

  it("makes a confidential client authenticate for the code and refresh grants: one with a secret, one with private_key_jwt", async () => {
    const machine = await client("confidential-secret", {}, true)
    const unauthenticated = await exchange(machine.id, await codeFor(machine.id))
    expect(body(unauthenticated)).toMatchObject({ status: 401, error: "invalid_client" })
    const tokens = body(await exchange(machine.id, await codeFor(machine.id), { client_secret: machine.secret as string }))
    expect(tokens.refresh_token).toBeTruthy()
    const refresh = (extra: Record<string, string>) => server.token(new URLSearchParams({ grant_type: "refresh_token", client_id: machine.id, refresh_token: tokens.refresh_token as string, ...extra }), undefined)
    expect(body(await refresh({}))).toMatchObject({ status: 401, error: "invalid_client" })
    // Refused before it counted as a use: the client itself still refreshes with it.
    expect((await refresh({ client_secret: machine.secret as string })).status).toBe(200)

    // Approved without a secret: its document alone makes it confidential.
    const signing = await signingClient("confidential-jwt", false)
    expect(body(await exchange(signing.id, await codeFor(signing.id)))).toMatchObject({ status: 401, error: "invalid_client" })
    const signed = body(await exchange(signing.id, await codeFor(signing.id), { client_assertion_type: ASSERTION_TYPE, client_assertion: await assertion(signing.id, signing.privateKey, signing.kid) }))
    expect(signed.refresh_token).toBeTruthy()
    const refreshSigned = (extra: Record<string, string>) => server.token(new URLSearchParams({ grant_type: "refresh_token", client_id: signing.id, refresh_token: signed.refresh_token as string, ...extra }), undefined)
    expect(body(await refreshSigned({}))).toMatchObject({ status: 401, error: "invalid_client" })
    expect((await refreshSigned({ client_assertion_type: ASSERTION_TYPE, client_assertion: await assertion(signing.id, signing.privateKey, signing.kid) })).status).toBe(200)
    // A public client still needs nothing but its id.
    const open = await client("public")
    const publicTokens = body(await exchange(open.id, await codeFor(open.id)))
    expect(publicTokens.refresh_token).toBeTruthy()

    // Later, the clients' documents are past their cache time and cannot be fetched: each refresh is decided by its record.
    site.docs.delete("/public.json")
    site.docs.delete("/confidential-jwt.json")
    clock = Date.now() + 2 * 3600_000
    const publicRefresh = await server.token(new URLSearchParams({ grant_type: "refresh_token", client_id: open.id, refresh_token: publicTokens.refresh_token as string }), undefined)
    expect(publicRefresh.status, JSON.stringify(body(publicRefresh))).toBe(200)
    expect(await refreshSigned({})).toMatchObject({ status: 401, error: "invalid_client", description: expect.stringMatching(/confidential/) })
    clock = Date.now()
  })

  it("a refresh token of an older version (no mark) is judged by its client's document, and its rotation keeps the mark", async () => {
    const signing = await signingClient("legacy-jwt", false)
    const signedIn = () => assertion(signing.id, signing.privateKey, signing.kid)
    const tokens = body(await exchange(signing.id, await codeFor(signing.id), { client_assertion_type: ASSERTION_TYPE, client_assertion: await signedIn() }))
    await state.flush()
    const doc = JSON.parse(readFileSync(stateFile, "utf8")) as { refresh: Record<string, Record<string, unknown>> }
    for (const record of Object.values(doc.refresh)) delete record["confidential"]
    writeFileSync(stateFile, JSON.stringify(doc))
    const refresh = (extra: Record<string, string>) => server.token(new URLSearchParams({ grant_type: "refresh_token", client_id: signing.id, refresh_token: tokens.refresh_token as string, ...extra }), undefined)
    expect(await refresh({})).toMatchObject({ status: 401, error: "invalid_client" })
    const rotated = body(await refresh({ client_assertion_type: ASSERTION_TYPE, client_assertion: await signedIn() }))
    expect(rotated.refresh_token).toBeTruthy()
    await state.flush()
    const kept = (JSON.parse(readFileSync(stateFile, "utf8")) as { refresh: Record<string, Record<string, unknown>> }).refresh
    expect(Object.values(kept).filter((r) => r["client_id"] === signing.id && r["used"] === false)).toEqual([expect.objectContaining({ confidential: true })])
  })

  it("refuses a code whose client's approval was withdrawn after it was given", async () => {
    const { id } = await client("withdrawn")
    const code = await codeFor(id)
    expect(await server.withdraw(id)).toEqual({ families: 0 })
    expect(body(await exchange(id, code))).toMatchObject({ status: 400, error: "invalid_grant" })
  })

  it("client assertions: a wrong type is invalid_client 401; an absurd exp is refused; the replay record lasts as long as the assertion may be", async () => {
    const signing = await signingClient("assertions")
    const grant = async (fields: Record<string, string>) => server.token(new URLSearchParams({ grant_type: "client_credentials", resource: RESOURCE, ...fields }), undefined)
    expect(body(await grant({ client_assertion_type: "urn:wrong", client_assertion: await assertion(signing.id, signing.privateKey, signing.kid) }))).toMatchObject({ status: 401, error: "invalid_client" })
    clock = Date.now()
    const now = Math.floor(Date.now() / 1000)
    const absurd = await grant({ client_assertion_type: ASSERTION_TYPE, client_assertion: await assertion(signing.id, signing.privateKey, signing.kid, (j) => j.setExpirationTime(1e20)) })
    expect(body(absurd)).toMatchObject({ status: 401, error: "invalid_client" })
    const kept = assertionsKept.length
    const long = await grant({ client_assertion_type: ASSERTION_TYPE, client_assertion: await assertion(signing.id, signing.privateKey, signing.kid, (j) => j.setExpirationTime(now + 3600)) })
    expect(long.status).toBe(200)
    expect(assertionsKept.length).toBe(kept + 1)
    expect(assertionsKept.at(-1)!).toBeLessThanOrEqual((now + 1 + 300 + 30) * 1000)
  })

  it("reads a client's document again for a key it does not know (rotated), at most every 30 s per client", async () => {
    const signing = await signingClient("rotating")
    const grant = async (key: CryptoKey, kid: string) =>
      server.token(new URLSearchParams({ grant_type: "client_credentials", resource: RESOURCE, client_assertion_type: ASSERTION_TYPE, client_assertion: await assertion(signing.id, key, kid) }), undefined)
    expect((await grant(signing.privateKey, signing.kid)).status).toBe(200)
    const rotate = async (kid: string) => {
      const { publicKey, privateKey } = await generateKeyPair("ES256")
      site.docs.set("/rotating.json", { client_id: signing.id, redirect_uris: [callback], token_endpoint_auth_method: "private_key_jwt", jwks: { keys: [{ ...(await exportJWK(publicKey)), kid, alg: "ES256" }] } })
      return privateKey
    }
    const second = await rotate("rotating-2")
    expect((await grant(second, "rotating-2")).status).toBe(200)
    // Rotated again at once: not read again within 30 s, then read.
    const third = await rotate("rotating-3")
    expect(body(await grant(third, "rotating-3"))).toMatchObject({ status: 401, error: "invalid_client" })
    clock += 31_000
    expect((await grant(third, "rotating-3")).status).toBe(200)
  })
})

describe("the client metadata cache's failures", () => {
  let site: Awaited<ReturnType<typeof startClientSite>>
  const lines: string[] = []
  let restoreLogging: () => void = () => undefined
  beforeAll(async () => {
    restoreLogging = configureLogging({ level: "info", write: (line) => void lines.push(line) })
    site = await startClientSite()
  })
  afterAll(async () => {
    restoreLogging()
    await site?.close()
  })

  it("tells the requester no upstream status or network error (the log has them), and keeps a failure 30 s", async () => {
    let clock = Date.now()
    const cache = new ClientMetadataCache(new UpstreamPolicy(), true, () => clock)
    const missing = `${site.base}/later.json`
    const closed = "http://127.0.0.1:9/client.json"
    const messageOf = (id: string) => cache.get(id).then(() => "fetched", (e: Error) => e.message)
    expect(await messageOf(missing)).toBe("the client metadata document could not be fetched")
    expect(await messageOf(closed)).toBe("the client metadata document could not be fetched")
    expect(lines.join("")).toMatch(/later\.json.*HTTP 404/)
    expect(lines.join("")).toMatch(/127\.0\.0\.1:9\/client\.json.* could not be fetched: .+/)
    // Published now: the failure is kept for 30 s, then the document is fetched.
    site.docs.set("/later.json", { client_id: missing, redirect_uris: [`${site.base}/callback`] })
    expect(await messageOf(missing)).toBe("the client metadata document could not be fetched")
    clock += 31_000
    expect(await messageOf(missing)).toBe("fetched")
  })

  it("a refetch that fails (anyone may ask for one) leaves the kept document in use", async () => {
    let clock = Date.now()
    const cache = new ClientMetadataCache(new UpstreamPolicy(), true, () => clock)
    const id = `${site.base}/kept.json`
    site.docs.set("/kept.json", { client_id: id, redirect_uris: [`${site.base}/callback`] })
    expect((await cache.get(id)).client_id).toBe(id)
    site.docs.delete("/kept.json")
    expect(await cache.refetch(id)).toBeUndefined()
    expect((await cache.get(id)).client_id).toBe(id)
    clock += 1_000
    expect((await cache.get(id)).client_id).toBe(id)
  })
})
