/**
 * A definition's `oauth` field is checked like every other field (src/domain/schemas.ts
 * `OAuthSettings`): add_service and update_service refuse a malformed one with 400
 * VALIDATION_ERROR naming the field and change nothing; a services file entry with one is loaded
 * as unreachable with its problem, as other bad entries are.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { closedPort, startTestServer, type TestServer } from "../support/index.js"

let server: TestServer
let url: string

beforeAll(async () => {
  url = `http://127.0.0.1:${await closedPort()}/mcp`
  server = await startTestServer({ services: { mcpServers: { filed: { url: "http://127.0.0.1:9/mcp", oauth: { grant_type: "password" } } } } })
})
afterAll(async () => {
  await server?.cleanup()
})

const fieldsOf = (body: any): Array<{ field: string; problem: string }> => body.error.details.fields

describe("a definition's oauth field", () => {
  const bad: ReadonlyArray<readonly [string, unknown, string, RegExp]> = [
    ["not an object", "secret", "oauth", /must be an object/],
    ["client_id of the wrong type", { client_id: 5 }, "oauth.client_id", /must be a string/],
    ["an unknown grant_type", { grant_type: "password" }, "oauth.grant_type", /authorization_code.*client_credentials/],
    ["client_secret without client_id", { client_secret: "s3cret-value" }, "oauth.client_secret", /needs "client_id"/],
    ["client_credentials without a secret", { client_id: "c", grant_type: "client_credentials" }, "oauth.client_secret", /is required/],
    ["a scope that is not a string", { scopes: ["mcp:tools", 7] }, "oauth.scopes[1]", /must be a string/],
    ["a scope with a space", { scopes: ["a b"] }, "oauth.scopes[0]", /one scope/],
    ["scopes not an array", { scopes: "mcp:tools" }, "oauth.scopes", /must be an array/],
    ["a misspelt field", { clientId: "c" }, "oauth.clientId", /is unknown/],
    ["an issuer that is not an http(s) URL", { issuer: "ftp://auth.example.com" }, "oauth.issuer", /issuer URL/]
  ]

  it.each(bad)("add_service refuses %s with 400 naming the field, and adds nothing", async (_what, oauth, field, problem) => {
    const before = server.readFileText()
    const answer = await server.post("/for_store/add_service", { name: "guarded", url, oauth })
    expect(answer.status).toBe(400)
    expect(answer.body.error.code).toBe("VALIDATION_ERROR")
    const named = fieldsOf(answer.body).find((f) => f.field === field)
    expect(named?.problem).toMatch(problem)
    // The secret a caller sent is never echoed back.
    expect(JSON.stringify(answer.body)).not.toContain("s3cret-value")
    expect(server.readFileText()).toBe(before)
    expect((await server.get("/for_store/get_service_info?name=guarded")).status).toBe(404)
  })

  it("refuses oauth on a local (command) service", async () => {
    const answer = await server.post("/for_store/add_service", { name: "local", command: "node", oauth: { client_id: "c" } })
    expect(answer.status).toBe(400)
    expect(fieldsOf(answer.body).map((f) => f.field)).toContain("oauth")
  })

  it("update_service refuses a malformed oauth and keeps the definition", async () => {
    expect((await server.post("/for_store/add_service", { name: "kept", url, oauth: { client_id: "c", scopes: ["mcp:tools"] } })).status).toBe(200)
    const before = server.readFileText()
    const answer = await server.request("PUT", "/for_store/update_service/kept", {
      body: JSON.stringify({ url, oauth: { client_id: "c", grant_type: "implicit" } }),
      headers: { "content-type": "application/json" }
    })
    expect(answer.status).toBe(400)
    expect(fieldsOf(answer.body).map((f) => f.field)).toEqual(["oauth.grant_type"])
    expect(server.readFileText()).toBe(before)
    const info = await server.get("/for_store/get_service_info?name=kept")
    expect(info.body.service.config.oauth).toEqual({ client_id: "c", scopes: ["mcp:tools"] })
  })

  it("a services-file entry with a malformed oauth is loaded as unreachable with its problem", async () => {
    const info = await server.get("/for_store/get_service_info?name=filed")
    expect(info.status).toBe(200)
    expect(info.body.service.status).toBe("unreachable")
    expect(info.body.service.last_error).toMatch(/oauth\.grant_type/)
  })
})
