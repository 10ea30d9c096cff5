"""The JavaScript the page runs in the browser (`app.ui.events` attaches it): the webcam's own
messages when the browser refuses the camera, its Stop button's early summary, and the hover text
of disabled controls.
"""

# Runs in the page at load: the webcam component stays silent when the browser refuses the camera,
# so getUserMedia is wrapped to show why (and what to do) in the webcam tab.
CAMERA_JS = """
() => {
  const show = (text) => {
    const box = document.getElementById("mstta-camera-message");
    if (box) { box.textContent = text; box.style.display = "block"; }
  };
  // the webcam's own Stop button: ask the server for the run's summary and downloads at once
  // (after the frames in flight), instead of waiting for frames to stop coming
  document.addEventListener("click", (event) => {
    const button = event.target.closest && event.target.closest("#mstta-webcam button");
    if (button && /stop/i.test(button.textContent || "")) {
      setTimeout(() => { const b = document.getElementById("mstta-webcam-stop"); if (b) b.click(); }, 400);
    }
  }, true);
  const md = navigator.mediaDevices;
  if (!md || !md.getUserMedia) {
    show("This page cannot use a webcam: browsers allow cameras only on https:// or http://localhost / " +
         "127.0.0.1 pages. Open the UI through one of those, or use a video.");
    return;
  }
  const original = md.getUserMedia.bind(md);
  md.getUserMedia = (constraints) => original(constraints).then((stream) => {
    const box = document.getElementById("mstta-camera-message");
    if (box) box.style.display = "none";
    return stream;
  }, (err) => {
    const name = (err && err.name) || "Error";
    const why = {
      NotAllowedError: "the browser (or you) denied access to the camera. Allow the camera for this site " +
                       "(camera icon in the address bar) and reload the page.",
      NotFoundError: "no camera was found. Connect one and reload the page, or use a video.",
      NotReadableError: "the camera is in use by another program or could not be started.",
      OverconstrainedError: "the camera does not support the requested settings.",
    }[name] || ("the camera could not be opened (" + name + ").");
    show("Webcam unavailable: " + why);
    throw err;
  });
}
"""
# Disabled controls explain themselves on hover too (Gradio sliders take no title attribute).
TOOLTIP_JS = """
(reasons) => {
  for (const [name, why] of Object.entries(JSON.parse(reasons || "{}"))) {
    const el = document.getElementById("mstta-" + name);
    if (el) { if (why) el.setAttribute("title", why); else el.removeAttribute("title"); }
  }
  return reasons;
}
"""
