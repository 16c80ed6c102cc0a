// The operator console (GET /console on the admin listener) in headless Chromium against a real
// `plaza up`: two SDK clients join a room; the page lists the room with both members and both
// sessions; a click on one session's Kick button closes that session with 4010 `kicked` (the
// client sees the close code, and does not retry) while the other stays. Then, against a
// `plaza up` with an admin token, the page asks for the token on the API's 401, keeps it in
// sessionStorage and lists the room with it. The screenshot is kept as a CI artifact.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { afterAll, expect, it } from "vitest";
import WebSocket from "ws";

import { PlazaClient, type WebSocketLike } from "../src/index.js";
import { REPO_ROOT } from "../test/fixtures.js";
import { startPlaza, until, type Plaza } from "../test/plaza.js";

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
export const SCREENSHOT = join(REPO_ROOT, "target", "browser", "console.png");

const plazas: Plaza[] = [];
const browsers: Browser[] = [];
const clients: PlazaClient[] = [];
const ws = (url: string) => new WebSocket(url) as unknown as WebSocketLike;

afterAll(async () => {
  for (const c of clients) c.close();
  for (const b of browsers) await b.close();
  for (const p of plazas) await p.stop();
});

async function open(url: string): Promise<Page> {
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  browsers.push(browser);
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.on("pageerror", (e) => console.error("[console] page error", e));
  // Drain and close ask for confirmation; the test only kicks, but never hang on a dialog.
  page.on("dialog", (d) => void d.accept());
  await page.goto(url, { waitUntil: "load" });
  return page;
}

function client(plaza: Plaza, room: string, name: string): PlazaClient {
  const c = new PlazaClient({ url: plaza.wsUrl, room, authToken: `guest:${name}`, webSocket: ws, backoff: { baseMs: 50, maxMs: 500 } });
  clients.push(c);
  return c.connect();
}

interface Shown {
  rooms: string[];
  members: string[];
  sessions: string[];
  needToken: boolean;
  error: string | null;
}

function shown(page: Page): Promise<Shown> {
  return page.evaluate((): Shown => {
    const rows = (sel: string, attr: string) => Array.from(document.querySelectorAll(sel), (r) => r.getAttribute(attr) ?? "");
    const c = (window as unknown as { plazaConsole: any }).plazaConsole;
    return {
      rooms: rows("#rooms tbody tr", "data-room"),
      members: rows("#members tbody tr", "data-wallet"),
      sessions: rows("#sessions tbody tr", "data-session"),
      needToken: c.state.needToken,
      error: c.state.lastError,
    };
  });
}

async function poll(page: Page, cond: (s: Shown) => boolean, ms: number, what: string): Promise<Shown> {
  const end = Date.now() + ms;
  let s = await shown(page);
  while (!cond(s)) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 100));
    s = await shown(page);
  }
  return s;
}

it("lists a live room with its members, and a kick from the page closes that session", async () => {
  const plaza = await startPlaza();
  plazas.push(plaza);
  const alice = client(plaza, "console", "alice");
  const bob = client(plaza, "console", "bob");
  const closes: { code: number; name: string; willRetry: boolean }[] = [];
  alice.on("close", (c) => closes.push(c));
  await until(() => alice.state === "joined" && bob.state === "joined", 15_000, "both joined");

  const page = await open(`${plaza.adminUrl}/console`);
  const s = await poll(page, (x) => x.rooms.includes("console") && x.members.length === 2 && x.sessions.length === 2, 20_000, "the room, its members and sessions");
  expect(new Set(s.members)).toEqual(new Set([alice.wallet, bob.wallet]));
  expect(new Set(s.sessions)).toEqual(new Set([String(alice.sessionId), String(bob.sessionId)]));
  // The node row shows this process (id, version, roles) with its process metrics.
  const nodeRow = await page.$eval("#node tbody tr", (r) => r.textContent ?? "");
  expect(nodeRow).toContain("gateway, node");
  expect(nodeRow).toContain("MiB");

  mkdirSync(join(REPO_ROOT, "target", "browser"), { recursive: true });
  await page.screenshot({ path: SCREENSHOT as `${string}.png`, fullPage: true });
  console.log(`browser: screenshot ${SCREENSHOT}`);

  await page.click(`#sessions tr[data-session="${String(alice.sessionId)}"] button.kick`);
  await until(() => closes.length > 0, 10_000, "alice's session closes");
  expect(closes[0]).toMatchObject({ code: 4010, name: "kicked", willRetry: false });
  await until(() => alice.state === "closed", 5_000, "alice stays closed");
  const after = await poll(page, (x) => x.sessions.length === 1 && x.members.length === 1, 10_000, "the page shows the kick");
  expect(after.sessions).toEqual([String(bob.sessionId)]);
  expect(bob.state).toBe("joined");
  const status = await page.$eval("#status", (e) => e.textContent ?? "");
  expect(status).toContain(`kick ${String(alice.sessionId)}: done`);
});

it("asks for the admin token on a 401 and uses it", async () => {
  const token = "console-test-token";
  const plaza = await startPlaza([], { PLAZA__ADMIN__TOKEN: token });
  plazas.push(plaza);
  const carol = client(plaza, "guarded", "carol");
  await until(() => carol.state === "joined", 15_000, "carol joined");
  // The API refuses without the token.
  expect((await fetch(`${plaza.adminUrl}/v1/rooms`)).status).toBe(401);

  const page = await open(`${plaza.adminUrl}/console`);
  await poll(page, (x) => x.needToken, 10_000, "the token form");
  expect(await page.$eval("#token-form", (f) => getComputedStyle(f).display)).not.toBe("none");
  await page.type("#token", token);
  await page.click('#token-form button[type="submit"]');
  const s = await poll(page, (x) => !x.needToken && x.rooms.includes("guarded") && x.members.length === 1, 15_000, "the room with the token");
  expect(s.members).toEqual([carol.wallet]);
  expect(await page.evaluate(() => sessionStorage.getItem("plaza.admin.token"))).toBe(token);
});
