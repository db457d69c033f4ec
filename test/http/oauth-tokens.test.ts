// The access-token check of the store's protected resource (src/http/oauth-resource/), below the
// HTTP face: the verifier over several trusted issuers (one with a local key set, as the built-in
// authorization server will plug in; one external, discovered from a real OpenID provider), every
// refusal (expired, not yet valid, another audience, another issuer, an algorithm not allowed, an
// unsigned token, claims that give no principal), claim maps, the JWKS cache (fetched once,
// fetched again on a rotated key, at most once per cooldown), the outbound policy in front of the
// issuer, and the options that configure it all; and opaque tokens asked about at the provider's
// introspection endpoint (admitted, kept, refused, bounded).
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createLocalJWKSet, exportJWK, generateKeyPair, SignJWT, UnsecuredJWT, type CryptoKey, type JWK } from "jose"
import { checkOption, optionFromText, OptionsError } from "../../src/config/options.js"
import { claimMapOf } from "../../src/domain/claim-map.js"
import { UpstreamPolicy } from "../../src/mcp/upstream-policy.js"
import { externalIssuer, type ExternalIssuer } from "../../src/http/oauth-resource/external-issuer.js"
import { TokenVerifier, type TokenCheck } from "../../src/http/oauth-resource/token-verifier.js"
import { startOidcIssuer, type IssuerClient, type OidcIssuer } from "../fixtures/oidc-issuer.js"
import { eventually } from "../support/index.js"

const RESOURCE = "http://127.0.0.1:18200/mcp"
const LOCAL_ISSUER = "http://127.0.0.1:18200"

const AGENT: IssuerClient = { id: "agent-client", secret: "agent-secret-0123456789abcdef", claims: { role: "agent", agent_id: "agent-a", tools: ["svc__*"] } }

const refusal = (check: TokenCheck) => (check.ok ? "admitted" : check.why)

describe("access tokens", () => {
  let provider: OidcIssuer
  let signing: CryptoKey
  let localKeys: JWK
  const issuers: ExternalIssuer[] = []
  /** An external issuer of the provider, with its own cache (closed after the file). */
  const external = (options: Partial<Parameters<typeof externalIssuer>[0]> = {}) => {
    const made = externalIssuer({ issuer: provider.issuer, claimMap: claimMapOf(undefined), policy: new UpstreamPolicy(), ...options })
    issuers.push(made)
    return made
  }
  /** A token of the local issuer, signed with its key, with these claims over sensible ones. */
  const local = (claims: Record<string, unknown>, edit: (jwt: SignJWT) => SignJWT = (j) => j) =>
    edit(new SignJWT({ role: "admin", scope: "mcp-store:admin", ...claims }).setProtectedHeader({ alg: "ES256", kid: "local-1" }).setIssuer(LOCAL_ISSUER).setAudience(RESOURCE).setIssuedAt().setExpirationTime("5m")).sign(signing)

  beforeAll(async () => {
    provider = await startOidcIssuer([AGENT])
    const pair = await generateKeyPair("ES256")
    signing = pair.privateKey
    localKeys = { ...(await exportJWK(pair.publicKey)), kid: "local-1", alg: "ES256" }
  })
  afterAll(async () => {
    for (const i of issuers) i.close()
    await provider?.close()
  })

  it("admits the tokens of each trusted issuer, each with its own keys and claim names", async () => {
    const verifier = new TokenVerifier([external()])
    // The local issuer is trusted after the start, as the built-in authorization server is.
    verifier.trust({ issuer: LOCAL_ISSUER, keys: createLocalJWKSet({ keys: [localKeys] }), claimMap: claimMapOf({ role: "mcp_role", agent_id: "azp", tools: "mcp_tools", scope: "scp" }) })
    expect(verifier.issuers).toEqual([provider.issuer, LOCAL_ISSUER])
    const fromProvider = await verifier.verify(await provider.token(AGENT, RESOURCE, "mcp-store:tools"), [RESOURCE])
    expect(fromProvider).toMatchObject({ ok: true, principal: { role: "agent", agentId: "agent-a", tools: ["svc__*"], subject: `${provider.issuer} ${AGENT.id}` }, label: `token of '${AGENT.id}' from ${provider.issuer}` })
    expect(fromProvider.ok && [...fromProvider.scopes]).toEqual(["mcp-store:tools"])
    const fromLocal = await verifier.verify(await local({ role: undefined, scope: undefined, mcp_role: ["agent"], azp: "agent-b", mcp_tools: ["x__y"], scp: ["mcp-store:read", "mcp-store:tools"] }), [RESOURCE])
    expect(fromLocal).toMatchObject({ ok: true, principal: { role: "agent", agentId: "agent-b", tools: ["x__y"] } })
    expect(fromLocal.ok && [...fromLocal.scopes]).toEqual(["mcp-store:read", "mcp-store:tools"])
  })

  it("refuses expired, not yet valid, other-audience, other-issuer, HS256 and unsigned tokens", async () => {
    const verifier = new TokenVerifier([{ issuer: LOCAL_ISSUER, keys: createLocalJWKSet({ keys: [localKeys] }) }])
    const now = Math.floor(Date.now() / 1000)
    const hs = await new SignJWT({ role: "admin" }).setProtectedHeader({ alg: "HS256", kid: "local-1" }).setIssuer(LOCAL_ISSUER).setAudience(RESOURCE).setExpirationTime("5m").sign(new TextEncoder().encode("a-shared-secret-of-thirty-two-bytes!"))
    const unsigned = new UnsecuredJWT({ role: "admin" }).setIssuer(LOCAL_ISSUER).setAudience(RESOURCE).setExpirationTime("5m").encode()
    const cases: Array<[string, string]> = [
      [await local({}, (j) => j.setExpirationTime(now - 120)), "expired"],
      [await local({}, (j) => j.setNotBefore(now + 120)), "claims"],
      [await local({}, (j) => j.setAudience("http://127.0.0.1:18200/for_agent/other/mcp")), "audience"],
      [await local({}, (j) => j.setIssuer("http://127.0.0.1:1")), "issuer"],
      [await new SignJWT({ role: "admin" }).setProtectedHeader({ alg: "ES256", kid: "unknown-kid" }).setIssuer(LOCAL_ISSUER).setAudience(RESOURCE).setExpirationTime("5m").sign(signing), "signature"],
      [hs, "signature"],
      [unsigned, "malformed"],
      ["not.a.jwt", "malformed"],
      ["x".repeat(20_000), "malformed"]
    ]
    for (const [token, why] of cases) expect(refusal(await verifier.verify(token, [RESOURCE])), token.slice(0, 40)).toBe(why)
    // An audience is compared with its scheme and host case-blind and without a trailing slash; a list needs one of them.
    for (const [aud, why] of [
      ["HTTP://127.0.0.1:18200/mcp", "admitted"],
      [`${RESOURCE}/`, "admitted"],
      [["https://elsewhere.example", RESOURCE], "admitted"],
      ["http://127.0.0.1:18200/MCP", "audience"],
      [["https://elsewhere.example"], "audience"]
    ] as const) {
      expect(refusal(await verifier.verify(await local({}, (j) => j.setAudience(aud as string | string[])), [RESOURCE])), JSON.stringify(aud)).toBe(why)
    }
    // Within the clock tolerance (30 s), a token just expired still passes.
    expect(refusal(await verifier.verify(await local({}, (j) => j.setExpirationTime(now - 5)), [RESOURCE]))).toBe("admitted")
  })

  it("refuses a token whose claims give no principal, and gives an agent without tools none under --deny-by-default", async () => {
    const verifier = new TokenVerifier([{ issuer: LOCAL_ISSUER, keys: createLocalJWKSet({ keys: [localKeys] }) }], true)
    const messages: Array<[Record<string, unknown>, RegExp]> = [
      [{ role: undefined }, /no role claim/],
      [{ role: "root" }, /none of admin, agent, reader/],
      [{ role: ["admin", "agent"] }, /several roles/],
      [{ role: "agent" }, /needs the claim 'agent_id'/],
      [{ role: "agent", agent_id: "bad id/../x" }, /no agent id/],
      [{ role: "agent", agent_id: "agent-a", tools: "svc__*" }, /'tools' must be an array/]
    ]
    for (const [claims, message] of messages) {
      const check = await verifier.verify(await local(claims), [RESOURCE])
      expect(check.ok).toBe(false)
      expect(!check.ok && check.message).toMatch(message)
    }
    expect(await verifier.verify(await local({ role: "agent", agent_id: "agent-a" }), [RESOURCE])).toMatchObject({ ok: true, principal: { role: "agent", agentId: "agent-a", tools: [] } })
  })

  it("discovers the issuer once, fetches its keys once for many tokens, and again when a token names a rotated key", async () => {
    const before = { ...provider.fetches }
    const verifier = new TokenVerifier([external({ cooldownMs: 0 })])
    const tokens = await Promise.all([1, 2, 3].map(() => provider.token(AGENT, RESOURCE)))
    for (const token of tokens) expect(refusal(await verifier.verify(token, [RESOURCE]))).toBe("admitted")
    expect(provider.fetches.discovery - before.discovery).toBe(1)
    expect(provider.fetches.jwks - before.jwks).toBe(1)
    await provider.rotate()
    const rotated = await provider.token(AGENT, RESOURCE)
    expect(refusal(await verifier.verify(rotated, [RESOURCE]))).toBe("admitted")
    expect(provider.fetches.jwks - before.jwks).toBe(2)
    // The old key stays published: its tokens still pass, from the cache.
    expect(refusal(await verifier.verify(tokens[0]!, [RESOURCE]))).toBe("admitted")
    expect(provider.fetches.jwks - before.jwks).toBe(2)
  })

  it("asks for the keys again at most once per cooldown, however many tokens name an unknown key", async () => {
    const verifier = new TokenVerifier([external({ cooldownMs: 60_000 })])
    const first = await provider.token(AGENT, RESOURCE)
    expect(refusal(await verifier.verify(first, [RESOURCE]))).toBe("admitted")
    const fetched = provider.fetches.jwks
    await provider.rotate()
    const rotated = await provider.token(AGENT, RESOURCE)
    const checks = await Promise.all(Array.from({ length: 20 }, () => verifier.verify(rotated, [RESOURCE])))
    expect(new Set(checks.map(refusal))).toEqual(new Set(["signature"]))
    expect(provider.fetches.jwks).toBe(fetched)
  })

  it("reaches the issuer only through the outbound policy, and refuses a discovery document naming another issuer", async () => {
    const before = provider.fetches.discovery
    const refused = await new TokenVerifier([external({ policy: new UpstreamPolicy({ allow: ["10.0.0.0/8"] }) })]).verify(await provider.token(AGENT, RESOURCE), [RESOURCE])
    expect(refused).toMatchObject({ ok: false, why: "unavailable" })
    expect(!refused.ok && refused.detail).toMatch(/not in --upstream-allow/)
    expect(provider.fetches.discovery).toBe(before)
    // The issuer as configured must be the document's, exactly (a trailing slash is another issuer).
    const misnamed = external({ issuer: `${provider.issuer}/` })
    const check = await new TokenVerifier([misnamed]).verify(await new SignJWT({ role: "admin" }).setProtectedHeader({ alg: "ES256" }).setIssuer(`${provider.issuer}/`).setAudience(RESOURCE).setExpirationTime("5m").sign(signing), [RESOURCE])
    expect(check).toMatchObject({ ok: false, why: "unavailable" })
    expect(!check.ok && check.detail).toMatch(/names the issuer/)
  })

  it("starts while the issuer is down, asks again at most once per cooldown, and takes its tokens once it is back", async () => {
    const token = await provider.token(AGENT, RESOURCE)
    const verifier = new TokenVerifier([external({ cooldownMs: 1_500 })])
    await provider.pause()
    try {
      const down = await verifier.verify(token, [RESOURCE])
      expect(down).toMatchObject({ ok: false, why: "unavailable" })
      expect(!down.ok && down.detail).toMatch(/no metadata/)
    } finally {
      await provider.resume()
    }
    // Within the cooldown the failure stands, without a request to the issuer.
    const asked = provider.fetches.discovery
    expect(refusal(await verifier.verify(token, [RESOURCE]))).toBe("unavailable")
    expect(provider.fetches.discovery).toBe(asked)
    expect(await eventually(async () => refusal(await verifier.verify(token, [RESOURCE])) === "admitted", 5_000, 50)).toBe(true)
    expect(provider.fetches.discovery).toBe(asked + 1)
  })

  it("checks --public-url, --auth-issuer and --auth-claim-map as options", () => {
    expect(checkOption("public_url", "https://store.example.com/base/")).toBe("https://store.example.com/base")
    expect(checkOption("auth_issuer", "https://login.example.com/realms/x")).toBe("https://login.example.com/realms/x")
    expect(optionFromText("auth_claim_map", '{"role":"mcp_role","scope":"scp"}')).toEqual({ role: "mcp_role", scope: "scp" })
    for (const [key, value] of [
      ["public_url", "ftp://store.example.com"],
      ["public_url", "https://store.example.com/?x=1"],
      ["public_url", "https://store.example.com/#top"],
      ["public_url", "/relative"],
      ["auth_issuer", "https://user:pass@login.example.com"],
      ["auth_claim_map", { role: "" }],
      ["auth_claim_map", { groups: "g" }],
      ["auth_claim_map", ["role"]]
    ] as const) {
      expect(() => checkOption(key, value), `${key} ${JSON.stringify(value)}`).toThrow(OptionsError)
    }
    expect(() => optionFromText("auth_claim_map", "{not json")).toThrow(/auth_claim_map must be a JSON object/)
  })
})

describe("opaque access tokens, introspected (RFC 7662)", () => {
  const STORE: IssuerClient = { id: "mcp-store-rs", secret: "store-rs-secret-0123456789abcdef", claims: {} }
  let provider: OidcIssuer
  const issuers: ExternalIssuer[] = []
  /** A verifier of the provider's tokens, asking its introspection endpoint as the store's client (or not at all). */
  const verifierOf = (introspection: IssuerClient | null = STORE) => {
    const made = externalIssuer({
      issuer: provider.issuer,
      claimMap: claimMapOf(undefined),
      policy: new UpstreamPolicy(),
      ...(introspection === null ? {} : { introspection: { clientId: introspection.id, clientSecret: introspection.secret } })
    })
    issuers.push(made)
    return new TokenVerifier([made])
  }

  beforeAll(async () => {
    provider = await startOidcIssuer([AGENT, STORE], 300, { opaque: true })
  })
  afterAll(async () => {
    for (const i of issuers) i.close()
    await provider?.close()
  })

  it("admits an active token for this resource with the principal of its claims, asking the issuer once for many requests", async () => {
    const token = await provider.token(AGENT, RESOURCE, "mcp-store:tools")
    expect(token.split(".")).toHaveLength(1)
    const verifier = verifierOf()
    expect(verifier.introspects).toBe(true)
    const before = provider.fetches.introspection
    const [first, second] = await Promise.all([verifier.verify(token, [RESOURCE]), verifier.verify(token, [RESOURCE])])
    expect(first).toMatchObject({ ok: true, principal: { role: "agent", agentId: "agent-a", tools: ["svc__*"], subject: `${provider.issuer} ${AGENT.id}` }, label: `token of '${AGENT.id}' from ${provider.issuer}` })
    expect(first.ok && [...first.scopes]).toEqual(["mcp-store:tools"])
    expect(second).toEqual(first)
    expect(refusal(await verifier.verify(token, [RESOURCE]))).toBe("admitted")
    expect(provider.fetches.introspection - before).toBe(1)
    // Its answer names the resource it is for: another resource's request refuses it, without asking again.
    expect(refusal(await verifier.verify(token, ["http://127.0.0.1:18200/for_agent/x/mcp"]))).toBe("audience")
    expect(provider.fetches.introspection - before).toBe(1)
  })

  it("refuses a token the issuer does not know (asked once a minute at most), one for another resource, and a bad client's questions", async () => {
    const verifier = verifierOf()
    const before = provider.fetches.introspection
    const madeUp = "opaque-token-the-issuer-never-issued-0123456789"
    expect(await verifier.verify(madeUp, [RESOURCE])).toMatchObject({ ok: false, why: "inactive" })
    expect(refusal(await verifier.verify(madeUp, [RESOURCE]))).toBe("inactive")
    expect(provider.fetches.introspection - before).toBe(1)
    expect(refusal(await verifier.verify(await provider.token(AGENT, "http://other.example/mcp"), [RESOURCE]))).toBe("audience")
    // The store's client with a wrong secret: the endpoint refuses to answer, and so is the token refused (not kept).
    const wrong = verifierOf({ ...STORE, secret: "not-the-secret-of-the-store-rs" })
    const token = await provider.token(AGENT, RESOURCE)
    const refused = await wrong.verify(token, [RESOURCE])
    expect(refused).toMatchObject({ ok: false, why: "unavailable" })
    expect(!refused.ok && refused.detail).toMatch(/HTTP 401/)
    expect(refusal(await wrong.verify(token, [RESOURCE]))).toBe("unavailable")
  })

  it("asks at most 32 questions at once: made-up tokens past that are refused, not queued", async () => {
    const verifier = verifierOf()
    const before = provider.fetches.introspection
    const checks = await Promise.all(Array.from({ length: 40 }, (_, i) => verifier.verify(`made-up-opaque-token-${i}-0123456789`, [RESOURCE])))
    const whys = checks.map(refusal)
    expect(whys.filter((w) => w === "inactive")).toHaveLength(32)
    expect(whys.filter((w) => w === "unavailable")).toHaveLength(8)
    expect(provider.fetches.introspection - before).toBe(32)
  })

  it("without the store's client at the issuer, an opaque token is refused unasked", async () => {
    const verifier = verifierOf(null)
    expect(verifier.introspects).toBe(false)
    const before = provider.fetches.introspection
    expect(refusal(await verifier.verify(await provider.token(AGENT, RESOURCE), [RESOURCE]))).toBe("malformed")
    expect(provider.fetches.introspection).toBe(before)
  })
})
