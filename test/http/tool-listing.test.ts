// Which requests of /mcp are in search mode (src/http/gateway/search-mode.ts, README "Large
// catalogs"): `?tools=` on the URL first, then the key's tool_mode, then --tool-search-scopes; the
// options and the keys CLI that set them refuse bad values; a key's tool_mode reaches its principal.
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { KeyRing, type Principal } from "../../src/config/api-keys.js"
import { runKeys } from "../../src/cli/keys-command.js"
import { checkOption, optionFromText, OptionsError } from "../../src/config/options.js"
import { agentScope, STORE_SCOPE } from "../../src/domain/service-definition.js"
import { toolListingOf } from "../../src/http/gateway/search-mode.js"

const settings = { scopes: ["store", "research-*"], alwaysVisible: ["memory__*"] }
const admin: Principal = { role: "admin" }
const agent = (id: string, toolMode?: "search" | "full"): Principal => ({ role: "agent", agentId: id, ...(toolMode !== undefined ? { toolMode } : {}) })
const mode = (l: ReturnType<typeof toolListingOf>) => (l === undefined ? "full" : "problem" in l ? `problem: ${l.problem}` : l.mode)

describe("toolListingOf", () => {
  it("takes ?tools= first, then the key's tool_mode, then --tool-search-scopes", () => {
    expect(mode(toolListingOf(settings, STORE_SCOPE, admin, undefined))).toBe("search")
    expect(mode(toolListingOf(settings, agentScope("research-1"), agent("research-1"), undefined))).toBe("search")
    expect(mode(toolListingOf(settings, agentScope("ops"), agent("ops"), undefined))).toBe("full")
    expect(mode(toolListingOf(settings, agentScope("ops"), agent("ops", "search"), undefined))).toBe("search")
    expect(mode(toolListingOf(settings, agentScope("research-1"), agent("research-1", "full"), undefined))).toBe("full")
    expect(mode(toolListingOf(settings, agentScope("research-1"), agent("research-1", "search"), "full"))).toBe("full")
    expect(mode(toolListingOf(settings, agentScope("ops"), agent("ops", "full"), "search"))).toBe("search")
    expect(mode(toolListingOf({ scopes: [], alwaysVisible: [] }, STORE_SCOPE, { role: "admin", toolMode: "search" }, undefined))).toBe("search")
  })

  it("refuses any other ?tools= value, and the parameter given twice", () => {
    for (const asked of ["", "Search", "all", ["search", "full"]]) expect(mode(toolListingOf(settings, STORE_SCOPE, admin, asked))).toMatch(/^problem: /)
  })

  it("lists the always-visible tools by their globs", () => {
    const listing = toolListingOf(settings, STORE_SCOPE, admin, "search")
    expect(listing !== undefined && !("problem" in listing) && listing.alwaysVisible.allows("memory__read_graph")).toBe(true)
    expect(listing !== undefined && !("problem" in listing) && listing.alwaysVisible.allows("github__create_issue")).toBe(false)
  })
})

describe("the options and the keys that set it", () => {
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-tool-listing-"))
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  it("--tool-search-scopes and --always-visible-tools take comma lists of globs and refuse bad ones", () => {
    expect(optionFromText("tool_search_scopes", "store, research-*")).toEqual(["store", "research-*"])
    expect(checkOption("always_visible_tools", ["memory__*"])).toEqual(["memory__*"])
    expect(() => checkOption("always_visible_tools", "x".repeat(201))).toThrow(OptionsError)
    expect(() => checkOption("tool_search_scopes", [5])).toThrow(OptionsError)
    expect(() => checkOption("tool_search_scopes", Array.from({ length: 101 }, (_, i) => `a${i}`))).toThrow(OptionsError)
  })

  it("keys create --tool-mode writes tool_mode, which the key's principal carries; a bad value or a reader key is refused", async () => {
    const file = join(dir, "keys.json")
    const run = async (...argv: string[]) => {
      let out = ""
      let err = ""
      const code = await runKeys([...argv, "--keys-file", file], {}, { writeOut: (t) => void (out += t), writeErr: (t) => void (err += t) })
      return { code, out: out.trim(), err }
    }
    const made = await run("create", "--role", "agent", "--agent", "a1", "--name", "searcher", "--tool-mode", "search")
    expect(made.code, made.err).toBe(0)
    expect((JSON.parse(readFileSync(file, "utf8")) as { keys: Array<{ tool_mode?: string }> }).keys[0]!.tool_mode).toBe("search")
    expect((await run("create", "--role", "agent", "--agent", "a1", "--tool-mode", "some")).code).not.toBe(0)
    expect((await run("create", "--role", "reader", "--tool-mode", "search")).code).not.toBe(0)
    const ring = new KeyRing(file, [])
    ring.loadSync()
    const found = ring.check(`Bearer ${made.out}`)
    expect(found.ok && found.principal).toEqual({ role: "agent", agentId: "a1", label: "searcher", toolMode: "search" })
    await ring.close()
  })
})
