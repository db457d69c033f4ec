/**
 * The dashboard page served at GET /ui: dashboard.html (one self-contained file, next to this
 * module) read once on first use and kept in memory.
 */
import { readFileSync } from "node:fs"

let cached: string | undefined

/** The dashboard's HTML text. */
export const dashboardHtml = (): string => {
  cached ??= readFileSync(new URL("./dashboard.html", import.meta.url), "utf8")
  return cached
}
