// How client-vscode/docs/*.png were taken: the packaged extension in a real VS Code (code-server 4.99.4 from the
// npm registry), driven by headless Chromium through playwright-core, over the H100 recording (replay backend).
//
//   mkdir /tmp/cs && cd /tmp/cs && npm init -y && npm install --ignore-scripts code-server@4.99.4 playwright-core@1.49
//   (cd node_modules/argon2 && ../.bin/node-pre-gyp rebuild --build-from-source)          # node-gyp from npm
//   cd node_modules/code-server/lib/vscode && npm install --omit=dev --ignore-scripts
//   for m in @parcel/watcher @vscode/spdlog native-watchdog node-pty @vscode/deviceid; do (cd node_modules/$m && node-gyp rebuild); done
//   cp /usr/bin/rg node_modules/@vscode/ripgrep/bin/rg && ln -s node_modules node_modules.asar    # Debian's ripgrep
//   (cd extensions && npm install --omit=dev --ignore-scripts)
//   node /tmp/cs/node_modules/code-server/out/node/entry.js --install-extension kerntune-0.1.0.vsix \
//        --extensions-dir /tmp/cs/ext --user-data-dir /tmp/cs/data
//   settings.json: kerntune.interpreter = the checkout's .venv/bin/python; kerntune.server.env =
//        {KERNTUNE_BACKEND: "replay:<copy of tests/data/stores/examples.sqlite>", KERNTUNE_REPLAY_DELAY_S: "0.5"};
//        kerntune.tuning.strategy = "exhaustive"; editor.hover.above = false
//   code-server --auth none --bind-addr 127.0.0.1:8080 --extensions-dir /tmp/cs/ext --user-data-dir /tmp/cs/data DEMO
//        (DEMO: a folder with tests/node/fixtures/row_sum.cu)
//   node screenshots.js all        (Chromium from Debian: /usr/bin/chromium)
const { chromium } = require(process.env.PLAYWRIGHT_CORE || '/tmp/cs/node_modules/playwright-core');
const fs = require('fs');
const out = process.env.OUT || '/tmp/cs/shots';
const CLIP = { x: 348, y: 70, width: 932, height: 810 };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
(async () => {
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.setDefaultTimeout(60000);
  await page.goto('http://127.0.0.1:8080/?folder=' + (process.env.DEMO || '/tmp/cs/demo') + '');
  await page.waitForSelector('.monaco-workbench', { timeout: 90000 });
  await sleep(4000);
  await page.screenshot({ clip: CLIP, path: `${out}/00_start.png` });
  // open the file through Quick Open
  await page.click('.monaco-list-row:has-text("row_sum.cu")');
  await sleep(8000);
  await page.screenshot({ clip: CLIP, path: `${out}/00b_opened.png` });
  await page.waitForSelector('.codelens-decoration a', { timeout: 90000 });
  await sleep(3000);
  await page.screenshot({ clip: CLIP, path: `${out}/01_lenses.png` });
  const stage = process.argv[2] || 'all';
  if (stage === 'lenses') { await browser.close(); return; }
  // Optimize kernel
  await page.click('.codelens-decoration a:has-text("Optimize kernel")');
  await page.waitForSelector('.notifications-toasts .notification-toast', { timeout: 60000 });
  await sleep(4000);
  await page.screenshot({ clip: CLIP, path: `${out}/02_progress.png` });
  // cancel from the notification: then optimize again to the end
  const cancelBtn = page.locator('.notifications-toasts .monaco-button:has-text("Cancel")');
  fs.writeFileSync(`${out}/cancel_count.txt`, String(await cancelBtn.count()));
  await cancelBtn.first().click();
  await sleep(3000);
  await page.screenshot({ clip: CLIP, path: `${out}/03_cancelled.png` });
  await page.waitForFunction(() => !document.querySelector('.notifications-toasts .monaco-button'), null, { timeout: 60000 });
  await page.click('.codelens-decoration a:has-text("Optimize kernel")');
  await page.waitForSelector('.codelens-decoration a:has-text("Tuning")', { timeout: 60000 });
  await page.waitForFunction(() => {
    const t = [...document.querySelectorAll('.codelens-decoration')].map((e) => e.textContent).join(' ');
    return t.includes('Apply best') && !t.includes('Tuning');
  }, null, { timeout: 120000 });
  await sleep(2000);
  await page.screenshot({ clip: CLIP, path: `${out}/04_done.png` });
  // hover the kernel name
  const name = page.locator('.view-line:has-text("__global__ void row_sum") span:text-is("row_sum")').first();
  const box = await name.boundingBox();
  await page.mouse.move(box.x + 5, box.y + box.height / 2);
  await sleep(300);
  await page.mouse.move(box.x + 10, box.y + box.height / 2);
  await page.waitForSelector('.monaco-hover:not(.hidden) .hover-contents', { timeout: 30000 });
  await sleep(2000);
  await page.screenshot({ clip: CLIP, path: `${out}/05_hover.png` });
  await page.mouse.move(5, 5);
  await sleep(500);
  await page.click('.codelens-decoration a:has-text("Apply best")');
  await page.waitForSelector('.codelens-decoration a:has-text("Applied best")', { timeout: 60000 });
  await sleep(2000);
  await page.screenshot({ clip: CLIP, path: `${out}/06_applied.png` });
  await browser.close();
})().catch(async (e) => { console.error(e); process.exit(1); });
