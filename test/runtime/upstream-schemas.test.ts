// The argument checker is never stricter than the upstream: the tools/list of every server the
// gateway issue names goes through it with the arguments their own docs show. server-everything is
// run for real; the others' published schemas are fixtures (test/fixtures/upstream-tools/*.json),
// in the shapes their schema generators write (zod 4 lists a `.default()` field as required,
// non-standard `format`s and `x-` keywords).
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { connect } from "../../src/mcp/connect.js"
import { withoutDefaultedRequired } from "../../src/mcp/json-schema.js"
import type { McpConnection, ToolInfo } from "../../src/mcp/types.js"
import { argumentProblems } from "../../src/runtime/arguments.js"
import { everythingStdio, REPO_ROOT } from "../fixtures/paths.js"
import { localDef, T } from "../support/index.js"

interface Published {
  readonly server: string
  readonly tools: ReadonlyArray<ToolInfo>
  readonly calls: ReadonlyArray<{ readonly tool: string; readonly arguments: Record<string, unknown> }>
}

const DIR = join(REPO_ROOT, "test", "fixtures", "upstream-tools")
const published: ReadonlyArray<Published> = readdirSync(DIR)
  .filter((f) => f.endsWith(".json"))
  .map((f) => JSON.parse(readFileSync(join(DIR, f), "utf8")) as Published)

const toolOf = (list: Published, name: string): ToolInfo => {
  const tool = list.tools.find((t) => t.name === name)
  if (tool === undefined) throw new Error(`${list.server} has no tool ${name}`)
  return tool
}

describe("published schemas of the issue's servers", () => {
  it("covers every server the issue names but server-everything (run for real below)", () => {
    expect(published.map((p) => p.server).sort()).toEqual([
      "@cyanheads/git-mcp-server",
      "@modelcontextprotocol/server-filesystem",
      "@modelcontextprotocol/server-memory",
      "@playwright/mcp",
      "@wonderwhy-er/desktop-commander"
    ])
  })

  for (const list of published) {
    it(`${list.server}: every documented call passes`, () => {
      for (const call of list.calls) {
        expect({ tool: call.tool, problems: argumentProblems(toolOf(list, call.tool), call.arguments) }).toEqual({
          tool: call.tool,
          problems: []
        })
      }
    })
  }

  it("playwright's browser_take_screenshot: scale (required, default css) may be left out", () => {
    const playwright = published.find((p) => p.server === "@playwright/mcp")!
    const screenshot = toolOf(playwright, "browser_take_screenshot")
    expect(screenshot.inputSchema["required"]).toEqual(["type", "scale"])
    expect(argumentProblems(screenshot, {})).toEqual([])
    // The checker still judges what is there: no stricter, but not blind.
    expect(argumentProblems(screenshot, { scale: "huge" })).toEqual([{ field: "args.scale", problem: "must be equal to one of the allowed values" }])
    expect(argumentProblems(screenshot, { zoom: 2 })).toEqual([{ field: "args", problem: "must NOT have additional properties" }])
  })

  it("a required property without a default is still reported missing, also when nested", () => {
    const memory = published.find((p) => p.server === "@modelcontextprotocol/server-memory")!
    expect(argumentProblems(toolOf(memory, "search_nodes"), {})).toEqual([{ field: "args.query", problem: "is required" }])
    expect(argumentProblems(toolOf(memory, "create_entities"), { entities: [{ name: "a", entityType: "person" }] })).toEqual([
      { field: "args.entities.0.observations", problem: "is required" }
    ])
    const git = published.find((p) => p.server === "@cyanheads/git-mcp-server")!
    expect(argumentProblems(toolOf(git, "git_commit"), {})).toEqual([{ field: "args.message", problem: "is required" }])
  })

  it("unknown formats are ignored, known ones still checked", () => {
    const git = published.find((p) => p.server === "@cyanheads/git-mcp-server")!
    const commit = toolOf(git, "git_commit")
    expect(argumentProblems(commit, { message: "m", path: "any thing at all", filesToStage: ["../x"] })).toEqual([])
    expect(argumentProblems(commit, { message: "m", author: { name: "J", email: "not an email" } })).toEqual([
      { field: "args.author.email", problem: 'must match format "email"' }
    ])
  })

  it("leaves a schema with nothing to change as it is, and copies only the way to a change", () => {
    const memory = published.find((p) => p.server === "@modelcontextprotocol/server-memory")!
    const entities = toolOf(memory, "create_entities").inputSchema
    expect(withoutDefaultedRequired(entities)).toBe(entities)
    const schema = {
      type: "object",
      properties: {
        kept: { type: "object", properties: { a: { type: "string" } }, required: ["a"] },
        changed: { type: "object", properties: { b: { type: "string", default: "x" } }, required: ["b"] }
      },
      required: ["kept"],
      // Data, not a subschema: never rewritten.
      default: { properties: { c: { default: 1 } }, required: ["c"] }
    }
    const result = withoutDefaultedRequired(schema) as typeof schema
    expect(result).not.toBe(schema)
    expect(result.properties.kept).toBe(schema.properties.kept)
    expect(result.properties.changed.required).toEqual([])
    expect(schema.properties.changed.required).toEqual(["b"])
    expect(result.default).toBe(schema.default)
  })

  it("bounds its walk on a deeply nested hostile schema", () => {
    let deep: Record<string, unknown> = { type: "object", properties: { x: { default: 1 } }, required: ["x"] }
    for (let i = 0; i < 100_000; i++) deep = { type: "object", properties: { n: deep } }
    expect(() => withoutDefaultedRequired(deep)).not.toThrow()
  })
})

describe("server-everything's own tools/list", () => {
  let conn: McpConnection
  let tools: ReadonlyArray<ToolInfo>
  beforeAll(async () => {
    conn = await connect(localDef(everythingStdio), T)
    tools = await conn.listTools(T)
  })
  afterAll(async () => {
    await conn.close()
  })

  // The arguments its README shows for each tool (a tool it documents without arguments: {}).
  const documented: Record<string, Record<string, unknown>> = {
    echo: { message: "Hello, world" },
    "get-annotated-message": { messageType: "success", includeImage: true },
    "get-env": {},
    "get-resource-links": { count: 5 },
    "get-resource-reference": { resourceType: "Text", resourceId: 2 },
    "get-structured-content": { location: "New York" },
    "get-sum": { a: 2, b: 40 },
    "get-tiny-image": {},
    "gzip-file-as-resource": {},
    "toggle-simulated-logging": {},
    "toggle-subscriber-updates": {},
    "trigger-long-running-operation": { duration: 2, steps: 2 },
    "simulate-research-query": { topic: "MCP gateways" },
    // Offered once the client declares sampling (the store relays it to MCP clients that do).
    "trigger-sampling-request": { prompt: "Say hello" }
  }

  it("every tool accepts its documented arguments and its defaults left out", () => {
    expect(tools.length).toBeGreaterThanOrEqual(10)
    for (const tool of tools) {
      const args = documented[tool.name] ?? {}
      // A tool that requires MCP tasks is checked as any other (the store calls it as a task).
      const problems = argumentProblems(tool, args)
      expect({ tool: tool.name, problems }).toEqual({ tool: tool.name, problems: [] })
    }
    const sum = tools.find((t) => t.name === "get-sum")!
    expect(argumentProblems(sum, { a: 2 })).toEqual([{ field: "args.b", problem: "is required" }])
  })
})
