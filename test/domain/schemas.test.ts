// The domain's schemas (src/domain/schemas.ts), the one place the rules for names, ids, statuses
// and service definitions are written: what each accepts, what it refuses and in which words (the
// problems a 400 answer lists in details.fields), what a decoded definition keeps, and how a
// definition resolves to a connection.
import { Either, Schema } from "effect"
import { describe, expect, it } from "vitest"
import {
  AddServiceBody,
  AgentId,
  fieldName,
  namedDefinitions,
  parseErrorProblems,
  ServiceDefinition,
  ServiceName,
  ServiceRef,
  Status,
  ToolName,
  UpdateServiceBody,
  agentIdProblem,
  serviceNameProblem
} from "../../src/domain/schemas.js"
import { DefinitionError, resolveDefinition } from "../../src/domain/service-definition.js"

/** The decoded value, or the field problems (as a 400 answer lists them). */
const decode = <A, I>(schema: Schema.Schema<A, I>, value: unknown): { ok: A } | { problems: Array<{ field: string; problem: string }> } => {
  const decoded = Schema.decodeUnknownEither(schema, { errors: "all" })(value)
  return Either.isRight(decoded) ? { ok: decoded.right } : { problems: parseErrorProblems(decoded.left) }
}
const problems = <A, I>(schema: Schema.Schema<A, I>, value: unknown) => {
  const result = decode(schema, value)
  if ("ok" in result) throw new Error(`accepted ${JSON.stringify(value)}`)
  return result.problems
}
const accepted = <A, I>(schema: Schema.Schema<A, I>, value: unknown): A => {
  const result = decode(schema, value)
  if ("problems" in result) throw new Error(`refused ${JSON.stringify(value)}: ${JSON.stringify(result.problems)}`)
  return result.ok
}

const URL_ = "http://127.0.0.1:9/mcp"
const NAME_RULE = "must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

describe("names and ids", () => {
  it("ServiceName: the pattern of docs/api.md, without '__' or '_byagent_'", () => {
    for (const name of ["a", "weather", "github.tools", "A-1_b.c", "constructor", "x".repeat(64)]) expect(accepted(ServiceName, name)).toBe(name)
    const cases: Array<[unknown, string]> = [
      ["", NAME_RULE],
      ["-a", NAME_RULE],
      ["_a", NAME_RULE],
      ["__proto__", NAME_RULE],
      ["a b", NAME_RULE],
      ["../x", NAME_RULE],
      ["☃", NAME_RULE],
      ["x".repeat(65), NAME_RULE],
      ["a__b", "must not contain '__'"],
      ["x_byagent_y", "must not contain '_byagent_'"],
      [5, "must be a string"]
    ]
    for (const [name, problem] of cases) expect(problems(ServiceName, name), JSON.stringify(name)).toEqual([{ field: "body", problem }])
    expect(serviceNameProblem("a__b")).toBe("must not contain '__'")
    expect(serviceNameProblem("ok")).toBeUndefined()
  })

  it("AgentId: ^[A-Za-z0-9_-]{1,100}$ and not \"store\"", () => {
    for (const id of ["agent-1", "A_b", "__proto__", "constructor", "a".repeat(100)]) expect(accepted(AgentId, id)).toBe(id)
    for (const id of ["", "bad id", "a.b", "a/b", "☃", "a".repeat(101)]) {
      expect(problems(AgentId, id), id).toEqual([{ field: "body", problem: "must match ^[A-Za-z0-9_-]{1,100}$" }])
    }
    expect(agentIdProblem("store")).toBe("must not be \"store\" (the store scope's name in monitoring figures)")
    expect(agentIdProblem("agent-1")).toBeUndefined()
  })

  it("ToolName and ServiceRef: non-empty, at most 256 characters", () => {
    const check = <A>(schema: Schema.Schema<A, string>) => {
      expect(accepted(schema, "weather__get_forecast")).toBe("weather__get_forecast")
      expect(accepted(schema, "client_store_weather_0123abcd")).toBe("client_store_weather_0123abcd")
      expect(problems(schema, "")).toEqual([{ field: "body", problem: "must not be empty" }])
      expect(problems(schema, "x".repeat(257))).toEqual([{ field: "body", problem: "must be at most 256 characters long" }])
      expect(problems(schema, 7)).toEqual([{ field: "body", problem: "must be a string" }])
    }
    check(ToolName)
    check(ServiceRef)
  })

  it("Status: the seven values of docs/lifecycle.md", () => {
    expect(Status.literals).toEqual(["initializing", "healthy", "warning", "reconnecting", "unreachable", "disconnecting", "disconnected"])
    expect(problems(Status, "HEALTHY")[0]!.problem).toBe(
      "must be one of initializing, healthy, warning, reconnecting, unreachable, disconnecting, disconnected"
    )
  })
})

describe("ServiceDefinition", () => {
  it("keeps unknown extra fields as they are, in their order", () => {
    const given = { note: "mine", command: "node", meta: { a: [1, 2] }, args: ["x.js"], zeta: null }
    const decoded = accepted(ServiceDefinition, given)
    expect(decoded).toEqual(given)
    expect(Object.keys(decoded)).toEqual(Object.keys(given))
  })

  it("takes `type` as a synonym of `transport`, and every transport spelling", () => {
    expect(resolveDefinition(accepted(ServiceDefinition, { command: "node", type: "stdio" }))).toMatchObject({ kind: "local", transport: "stdio" })
    for (const spelling of ["streamable_http", "streamable-http", "streamableHttp", "http"]) {
      expect(resolveDefinition(accepted(ServiceDefinition, { url: URL_, transport: spelling })).transport, spelling).toBe("streamable_http")
      expect(resolveDefinition(accepted(ServiceDefinition, { url: `${URL_}/sse`, type: spelling })).transport, spelling).toBe("streamable_http")
    }
    expect(resolveDefinition(accepted(ServiceDefinition, { url: URL_, type: "sse" })).transport).toBe("sse")
    // Not given: inferred from the URL.
    expect(resolveDefinition(accepted(ServiceDefinition, { url: "http://h/sse/" })).transport).toBe("sse")
    expect(resolveDefinition(accepted(ServiceDefinition, { url: "https://h/mcp" })).transport).toBe("streamable_http")
  })

  it("resolves a local service with its defaults", () => {
    expect(resolveDefinition({ command: "node" })).toEqual({ kind: "local", transport: "stdio", command: "node", args: [], env: {}, cwd: undefined })
    expect(resolveDefinition({ url: URL_, headers: { a: "b" } })).toEqual({ kind: "remote", transport: "streamable_http", url: URL_, headers: { a: "b" } })
  })

  it("names each problem as today's texts do", () => {
    const cases: Array<[unknown, Array<{ field: string; problem: string }>]> = [
      [{}, [{ field: "url", problem: "exactly one of 'url' and 'command' is required" }]],
      [{ url: URL_, command: "node" }, [{ field: "url", problem: "exactly one of 'url' and 'command' is required" }]],
      [{ url: 5 }, [{ field: "url", problem: "must be a string" }]],
      [{ url: "not a url" }, [{ field: "url", problem: "is not a valid URL" }]],
      [{ url: "ftp://127.0.0.1/mcp" }, [{ field: "url", problem: "only http and https URLs are allowed" }]],
      [{ url: "file:///etc/passwd" }, [{ field: "url", problem: "only http and https URLs are allowed" }]],
      [{ url: URL_, transport: "carrier-pigeon" }, [{ field: "transport", problem: "must be one of streamable_http, streamable-http, http, sse, stdio" }]],
      [{ url: URL_, type: 5 }, [{ field: "type", problem: "must be one of streamable_http, streamable-http, http, sse, stdio" }]],
      [{ url: URL_, transport: "stdio" }, [{ field: "transport", problem: "stdio needs 'command', not 'url'" }]],
      [{ command: "node", type: "sse" }, [{ field: "transport", problem: "a 'command' service uses stdio" }]],
      [{ command: 5 }, [{ field: "command", problem: "must be a non-empty string" }]],
      [{ command: "  " }, [{ field: "command", problem: "must be a non-empty string" }]],
      [{ command: "node", args: "a b" }, [{ field: "args", problem: "must be an array of strings" }]],
      [{ command: "node", args: ["a", 2] }, [{ field: "args", problem: "must be an array of strings" }]],
      [{ command: "node", env: [] }, [{ field: "env", problem: "must be an object of strings" }]],
      [{ command: "node", env: { A: 1, B: "ok", C: null } }, [{ field: "env.A", problem: "must be a string" }, { field: "env.C", problem: "must be a string" }]],
      [{ url: URL_, headers: { h: 5 } }, [{ field: "headers.h", problem: "must be a string" }]],
      [{ command: "node", cwd: 1 }, [{ field: "cwd", problem: "must be a string" }]],
      [{ url: URL_, disabled: "yes" }, [{ field: "disabled", problem: "must be a boolean" }]],
      [[], [{ field: "body", problem: "must be an object" }]],
      [null, [{ field: "body", problem: "must be an object" }]],
      // Every field's problem at once.
      [
        { url: 5, transport: "x", headers: 1 },
        [
          { field: "url", problem: "must be a string" },
          { field: "transport", problem: "must be one of streamable_http, streamable-http, http, sse, stdio" },
          { field: "headers", problem: "must be an object of strings" }
        ]
      ]
    ]
    for (const [value, expected] of cases) expect(problems(ServiceDefinition, value), JSON.stringify(value)).toEqual(expected)
  })

  it("refuses a \"__proto__\" key anywhere, before it could become a prototype", () => {
    const refused = "is not allowed: \"__proto__\" is not a usable key"
    expect(problems(ServiceDefinition, JSON.parse(`{"url": "${URL_}", "__proto__": {"command": "touch"}}`))).toEqual([{ field: "__proto__", problem: refused }])
    expect(problems(ServiceDefinition, JSON.parse('{"command": "true", "env": {"__proto__": {"PATH": "/x"}}}'))).toEqual([
      { field: "env.__proto__", problem: refused }
    ])
    expect(problems(ServiceDefinition, JSON.parse('{"command": "true", "args": ["a"], "x": [{"__proto__": 1}]}'))).toEqual([
      { field: "x[0].__proto__", problem: refused }
    ])
  })

  it("refuses a NUL in a program's command, arguments, environment or working directory, naming the field and never the value", () => {
    const refused = "must not contain NUL"
    const cases: Array<[unknown, Array<{ field: string; problem: string }>]> = [
      [{ command: "node", env: { A: "top\0secret" } }, [{ field: "env.A", problem: refused }]],
      [{ command: "node", env: { "A\0B": "v" } }, [{ field: "env", problem: "must not have a variable name that contains NUL" }]],
      [{ command: "node", args: ["ok", "x\0secret"] }, [{ field: "args[1]", problem: refused }]],
      [{ command: "no\0de" }, [{ field: "command", problem: refused }]],
      [{ command: "node", cwd: "/tmp\0secret" }, [{ field: "cwd", problem: refused }]]
    ]
    for (const [value, expected] of cases) {
      expect(problems(ServiceDefinition, value), JSON.stringify(value)).toEqual(expected)
      expect(problems(AddServiceBody, { name: "w", ...(value as object) })).toEqual(expected)
      expect(() => resolveDefinition(value as never)).toThrow(DefinitionError)
    }
    expect(accepted(ServiceDefinition, { command: "node", args: ["-e", "1"], env: { A: "b" }, cwd: "/tmp" })).toEqual({ command: "node", args: ["-e", "1"], env: { A: "b" }, cwd: "/tmp" })
  })

  it("resolveDefinition refuses an unusable definition (a hand edit) with the same problems", () => {
    try {
      resolveDefinition({ url: "ftp://x/y", transport: "stdio" } as never)
      expect.unreachable()
    } catch (e) {
      expect(e).toBeInstanceOf(DefinitionError)
      expect((e as DefinitionError).problems).toEqual([{ field: "url", problem: "only http and https URLs are allowed" }])
      expect((e as DefinitionError).message).toBe("url: only http and https URLs are allowed")
    }
  })
})

describe("add_service's body", () => {
  it("takes one definition with its name, {mcpServers}, or an array, and names each entry", () => {
    const one = accepted(AddServiceBody, { name: "w", url: URL_, note: 1 })
    expect(namedDefinitions(one)).toEqual([{ name: "w", definition: { url: URL_, note: 1 } }])
    const servers = accepted(AddServiceBody, { mcpServers: { a: { url: URL_ }, b: { command: "node", name: "ignored" } } })
    expect(namedDefinitions(servers)).toEqual([
      { name: "a", definition: { url: URL_ } },
      { name: "b", definition: { command: "node" } }
    ])
    const list = accepted(AddServiceBody, [{ name: "a", url: URL_ }, { name: "b", command: "node", type: "stdio" }])
    expect(namedDefinitions(list)).toEqual([
      { name: "a", definition: { url: URL_ } },
      { name: "b", definition: { command: "node", type: "stdio" } }
    ])
  })

  it("names the bad field of the bad entry, not just 'no member matched'", () => {
    const cases: Array<[unknown, Array<{ field: string; problem: string }>]> = [
      [null, [{ field: "body", problem: "must be a service definition, {mcpServers: {...}} or an array of definitions" }]],
      ["text", [{ field: "body", problem: "must be a service definition, {mcpServers: {...}} or an array of definitions" }]],
      [[], [{ field: "body", problem: "names no service" }]],
      [{ mcpServers: {} }, [{ field: "body", problem: "names no service" }]],
      [{}, [{ field: "name", problem: "is required and must be a string" }]],
      [{ name: 7, url: URL_ }, [{ field: "name", problem: "must be a string" }]],
      [{ name: "a__b", url: URL_ }, [{ field: "name", problem: "must not contain '__'" }]],
      [{ name: "ok", url: "ftp://h/x" }, [{ field: "url", problem: "only http and https URLs are allowed" }]],
      [{ mcpServers: [] }, [{ field: "mcpServers", problem: "must be an object of name to definition" }]],
      [{ mcpServers: { "a b": { url: URL_ } } }, [{ field: "mcpServers.a b.name", problem: NAME_RULE }]],
      [{ mcpServers: { ok: [] } }, [{ field: "mcpServers.ok", problem: "must be an object" }]],
      [{ mcpServers: { ok: { command: "node", env: { A: 1 } } } }, [{ field: "mcpServers.ok.env.A", problem: "must be a string" }]],
      [JSON.parse(`{"mcpServers": {"__proto__": {"url": "${URL_}"}}}`), [{ field: "mcpServers.__proto__.name", problem: NAME_RULE }]],
      [
        [{ name: "ok", url: URL_ }, { name: "../bad", url: URL_ }, null, { name: "ok", url: URL_ }],
        [
          { field: "[1].name", problem: NAME_RULE },
          { field: "[2]", problem: "must be an object" },
          { field: "[3].name", problem: "'ok' is given twice" }
        ]
      ]
    ]
    for (const [value, expected] of cases) expect(problems(AddServiceBody, value), JSON.stringify(value)).toEqual(expected)
  })
})

describe("update_service's body", () => {
  it("is a definition whose name may be left out", () => {
    expect(accepted(UpdateServiceBody, { url: URL_ })).toEqual({ url: URL_ })
    expect(accepted(UpdateServiceBody, { name: "w", command: "node" })).toEqual({ name: "w", command: "node" })
    expect(problems(UpdateServiceBody, [])).toEqual([{ field: "body", problem: "must be a service definition object" }])
    expect(problems(UpdateServiceBody, { name: "../x", url: URL_ })).toEqual([{ field: "name", problem: NAME_RULE }])
  })
})

it("field names: dotted keys, [i] for an array's items, `body` for the whole", () => {
  expect(fieldName([])).toBe("body")
  expect(fieldName(["mcpServers", "w", "url"])).toBe("mcpServers.w.url")
  expect(fieldName([1, "name"])).toBe("[1].name")
  expect(fieldName(["endpoints", 3, "url"])).toBe("endpoints[3].url")
})
