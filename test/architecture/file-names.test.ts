// No two source files share a name for different things: a name says what a file holds wherever it
// is. The HttpApi groups are the one pattern that repeats a name on purpose: each group's folder
// (src/http/store, agent, monitoring, app, approvals) has its contract in Api.ts and its handlers in
// Http.ts, and src/http/Api.ts joins the groups into the one API.
import { readdirSync } from "node:fs"
import { basename, join, relative, resolve } from "node:path"
import { describe, expect, it } from "vitest"

const SRC = resolve(import.meta.dirname, "../../src")
const GROUP_FILES = new Set(["Api.ts", "Http.ts"])

const sources = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : []))

describe("source file names", () => {
  it("name one thing each (the HttpApi groups' Api.ts and Http.ts aside)", () => {
    const byName = new Map<string, string[]>()
    for (const path of sources(SRC)) byName.set(basename(path), [...(byName.get(basename(path)) ?? []), relative(SRC, path)])
    const repeated = [...byName].filter(([name, paths]) => paths.length > 1 && !GROUP_FILES.has(name)).map(([, paths]) => paths.sort().join(" and "))
    expect(repeated).toEqual([])
    // They sit in src/http (the whole API) and its groups' folders only.
    for (const name of GROUP_FILES) for (const path of byName.get(name) ?? []) expect(path).toMatch(/^http\/([a-z-]+\/)?(Api|Http)\.ts$/)
  })
})
